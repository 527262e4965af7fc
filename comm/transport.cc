#include "comm/transport.h"

#include <unistd.h>

#include <climits>
#include <fstream>
#include <stdexcept>

#include "base/enum_names.h"
#include "base/env_names.h"
#include "base/run_env.h"

namespace cumulus::comm {

const char* transportName(Transport transport) { return base::nameOf(transport); }

std::optional<Transport> parseTransport(const std::string& name) {
  return base::valueNamed<Transport>(name);
}

Transport transportFromEnvironment() {
  const std::optional<std::string> value = base::DataPlaneEnv::fromEnvironment().transport;
  if (!value) return Transport::kAuto;
  auto parsed = parseTransport(*value);
  if (!parsed) {
    throw std::invalid_argument(std::string(base::env::kTransport) + "='" + *value +
                                "' is not one of auto, tcp, unix, shm");
  }
  return *parsed;
}

std::string localHostId() {
  std::string bootId;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, bootId);
  char host[HOST_NAME_MAX + 1] = {0};
  ::gethostname(host, sizeof host - 1);
  char netns[64] = {0};
  ssize_t n = ::readlink("/proc/self/ns/net", netns, sizeof netns - 1);
  if (n < 0) netns[0] = '\0';
  return bootId + "/" + host + "/" + netns;
}

}  // namespace cumulus::comm
