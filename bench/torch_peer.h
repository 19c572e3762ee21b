// bench/torch_peer.h — PyTorch in a child process (bench/mlp_torch.py or
// bench/conv_torch.py --serve), taking turns with adjit_bench or
// adjit_conv_bench: each request runs a batch of PyTorch calls while this
// process waits, so PyTorch's times come from the same seconds as adjit's.
// Linux-only, like the benchmarks' OpenMP baselines.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace bench {

class TorchPeer {
public:
  /// One raw f32 array the child reads from the folder.
  struct Input {
    std::string name; ///< file name, e.g. "x.f32"
    const float* data;
    long count;
  };

  /// Writes X [m, k], W1 [k, n], W2 [n, n] to `folder` and starts `python`
  /// on `script` there; available() says whether PyTorch answered.
  TorchPeer(const std::string& python, const std::string& script, const std::string& folder, const float* x,
            const float* w1, const float* w2, long m, long k, long n)
      : TorchPeer(python, script, folder, {{"x.f32", x, m * k}, {"w1.f32", w1, k * n}, {"w2.f32", w2, n * n}},
                  {std::to_string(m), std::to_string(k), std::to_string(n)}) {}

  /// Writes `inputs` to `folder` and starts `python script --serve folder
  /// args...`; available() says whether PyTorch answered.
  TorchPeer(const std::string& python, const std::string& script, const std::string& folder, const std::vector<Input>& inputs,
            const std::vector<std::string>& extra) {
    for (const Input& in : inputs) {
      FILE* f = std::fopen((folder + "/" + in.name).c_str(), "wb");
      const bool ok = f && std::fwrite(in.data, sizeof(float), static_cast<std::size_t>(in.count), f) == static_cast<std::size_t>(in.count);
      if (f) std::fclose(f);
      if (!ok) {
        status_ = "unavailable: cannot write its inputs to " + folder;
        return;
      }
    }
    std::signal(SIGPIPE, SIG_IGN); // a child that died makes writes fail, not this process
    int toChild[2], fromChild[2];
    if (pipe(toChild) != 0 || pipe(fromChild) != 0) {
      status_ = "unavailable: pipe failed";
      return;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, toChild[0], 0);
    posix_spawn_file_actions_adddup2(&actions, fromChild[1], 1);
    for (int fd : {toChild[0], toChild[1], fromChild[0], fromChild[1]}) posix_spawn_file_actions_addclose(&actions, fd);
    // One thread in every runtime PyTorch may load.
    std::vector<std::string> env = {"OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1"};
    for (char** e = environ; *e; ++e) {
      const std::string s = *e;
      if (s.rfind("OMP_NUM_THREADS=", 0) && s.rfind("MKL_NUM_THREADS=", 0) && s.rfind("OPENBLAS_NUM_THREADS=", 0)) env.push_back(s);
    }
    std::vector<std::string> args = {python, script, "--serve", folder};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    for (auto& e : env) envp.push_back(e.data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    const int rc = posix_spawn(&pid_, python.c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    close(toChild[0]);
    close(fromChild[1]);
    to_ = fdopen(toChild[1], "w");
    from_ = fdopen(fromChild[0], "r");
    if (rc != 0) {
      pid_ = -1;
      status_ = "unavailable: cannot run " + python;
      return;
    }
    status_ = readLine();
    if (status_.empty()) status_ = "unavailable: " + python + " " + script + " said nothing";
    available_ = status_.rfind("ready ", 0) == 0;
    if (available_) status_ = status_.substr(6); // "torch 1.13.1"
  }

  TorchPeer(const TorchPeer&) = delete;
  TorchPeer& operator=(const TorchPeer&) = delete;

  ~TorchPeer() {
    if (to_) std::fclose(to_); // the child's stdin ends: it exits
    if (from_) std::fclose(from_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }

  bool available() const { return available_; }
  /// "torch 1.13.1" when available, else "unavailable: REASON".
  const std::string& status() const { return status_; }

  /// Runs `calls` calls of the script's case `what` ("fwd" or "grad" for the
  /// MLP) in PyTorch; returns their times in ms (empty if the child has gone)
  /// and sets `value` to what the script says of the last call (the loss).
  std::vector<double> run(const char* what, int calls, double& value) {
    std::vector<double> times;
    if (!available_) return times;
    std::fprintf(to_, "%s %d\n", what, calls);
    std::fflush(to_);
    std::istringstream in(readLine());
    in >> value;
    for (double t; in >> t;) times.push_back(t);
    if (times.size() != static_cast<std::size_t>(calls)) {
      available_ = false;
      status_ = "unavailable: the PyTorch process stopped answering";
      times.clear();
    }
    return times;
  }

private:
  std::string readLine() {
    std::string s;
    for (int c; from_ && (c = std::fgetc(from_)) != EOF && c != '\n';) s.push_back(static_cast<char>(c));
    return s;
  }

  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
  bool available_ = false;
  std::string status_;
};

} // namespace bench
