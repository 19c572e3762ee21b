# test/ir/lit.cfg.py — FileCheck tests on printed IR, run by lit from CTest.
import os
import lit.formats

config.name = "adjit-ir"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".adj"]
config.test_source_root = os.path.dirname(__file__)
# Scratch files (%t) go to the build tree, not the sources.
config.test_exec_root = lit_config.params.get("exec_root", os.path.dirname(__file__))
config.substitutions.append(("%adjit", lit_config.params["adjit"]))
config.substitutions.append(("FileCheck", lit_config.params["filecheck"]))
config.substitutions.append(("not ", lit_config.params["not"] + " "))
config.substitutions.append(("split-file", lit_config.params["split_file"]))
# `adjit --version` is checked against CMake's project version and LLVM's.
config.substitutions.append(("%project_version", lit_config.params["project_version"]))
config.substitutions.append(("%llvm_version", lit_config.params["llvm_version"]))
# Compilations cache kernels in the build tree, never in the user's home.
config.environment["ADJIT_CACHE_DIR"] = os.path.join(config.test_exec_root, "kernel-cache")
# The CPU level and tiers asked of the whole run (ADJIT_CPU=x86-64-v3 ctest
# tests the AVX2 code paths) reach these tests too: lit passes no other
# variable of the caller's environment.
for name in ("ADJIT_CPU", "ADJIT_TIERS", "ADJIT_NUM_THREADS"):
    if name in os.environ:
        config.environment[name] = os.environ[name]
