#pragma once
// What an AgentConsole prints, captured as text: the launch tests compare the agent's lines
// exactly, because users read them and scripts match them.

#include <stdio.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "launch/agent_console.h"

namespace cumulus::launch {

inline std::string printed(const std::function<void(AgentConsole&)>& print) {
  char* buffer = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&buffer, &size);
  AgentConsole console(out);
  print(console);
  std::fclose(out);
  std::string text(buffer, size);
  std::free(buffer);
  return text;
}

}  // namespace cumulus::launch
