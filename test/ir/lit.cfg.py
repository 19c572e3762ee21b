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
