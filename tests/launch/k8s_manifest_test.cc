// launch/k8s/cumulus-job.yaml is an example users apply as is: parse it and check that the pieces
// that must agree do (Indexed Job ↔ --nnodes, Service ↔ subdomain ↔ rendezvous host, grace ↔
// --preemption-grace), and that the launcher accepts its command line.

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <regex>
#include <sstream>
#include <string>

#include "launch/options.h"

namespace {

const std::string kManifest = std::string(CUMULUS_SOURCE_DIR) + "/launch/k8s/cumulus-job.yaml";

std::string match(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return "";
  return m[1];
}

TEST(LaunchK8s, IndexedJobAndHeadlessServiceAgreeWithTheLauncherFlags) {
  const std::vector<YAML::Node> docs = YAML::LoadAllFromFile(kManifest);
  YAML::Node service, job;
  for (const auto& d : docs) {
    const std::string kind = d["kind"].as<std::string>();
    if (kind == "Service") service = d;
    if (kind == "Job") job = d;
  }
  ASSERT_TRUE(service && job) << kManifest << " needs a Service and a Job";
  EXPECT_EQ(service["apiVersion"].as<std::string>(), "v1");
  EXPECT_EQ(job["apiVersion"].as<std::string>(), "batch/v1");
  EXPECT_EQ(service["spec"]["clusterIP"].as<std::string>(), "None");
  EXPECT_TRUE(service["spec"]["publishNotReadyAddresses"].as<bool>());

  const YAML::Node spec = job["spec"];
  EXPECT_EQ(spec["completionMode"].as<std::string>(), "Indexed");
  const int completions = spec["completions"].as<int>();
  EXPECT_EQ(spec["parallelism"].as<int>(), completions);
  const YAML::Node pod = spec["template"]["spec"];
  const std::string job_name = job["metadata"]["name"].as<std::string>();
  const std::string service_name = service["metadata"]["name"].as<std::string>();
  EXPECT_EQ(pod["subdomain"].as<std::string>(), service_name);
  for (const auto& kv : service["spec"]["selector"]) {
    EXPECT_EQ(spec["template"]["metadata"]["labels"][kv.first.as<std::string>()].as<std::string>(),
              kv.second.as<std::string>());
  }

  const YAML::Node container = pod["containers"][0];
  const std::string command = container["args"][0].as<std::string>();
  ASSERT_NE(command.find("exec cumulus-run "), std::string::npos) << command;
  // The launcher must accept the command line as written (the index is filled in by the shell).
  std::vector<std::string> args;
  std::string flags = command.substr(command.find("cumulus-run ") + 12);
  flags = std::regex_replace(flags, std::regex("\"\\$JOB_COMPLETION_INDEX\""), "1");
  std::istringstream in(flags);
  for (std::string word; in >> word;) args.push_back(word);
  cumulus::launch::LaunchOptions o = cumulus::launch::parseLaunchArgs(args);
  EXPECT_EQ(o.max_nodes, completions);
  EXPECT_EQ(o.rdzv_host, job_name + "-0." + service_name);
  EXPECT_EQ(o.rdzv_port, service["spec"]["ports"][0]["port"].as<int>());
  EXPECT_EQ(container["ports"][0]["containerPort"].as<int>(), o.rdzv_port);
  // SIGTERM → agreed checkpoint → exit 75 must finish before the kubelet's SIGKILL.
  const int grace = pod["terminationGracePeriodSeconds"].as<int>();
  EXPECT_GE(grace, o.preemption_grace + 10) << "terminationGracePeriodSeconds " << grace
                                            << " vs --preemption-grace " << o.preemption_grace;
  EXPECT_EQ(pod["restartPolicy"].as<std::string>(), "Never");
  EXPECT_EQ(container["env"][0]["name"].as<std::string>(), "CUMULUS_JOB_TOKEN");
  EXPECT_TRUE(container["env"][0]["valueFrom"]["secretKeyRef"]);
  EXPECT_FALSE(match(command, "checkpoint.dir=(/ckpt[^ ]*)").empty()) << command;
  EXPECT_EQ(container["volumeMounts"][0]["mountPath"].as<std::string>(), "/ckpt");
}

}  // namespace
