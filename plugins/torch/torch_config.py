# Prints what meson needs to build a torch extension for this interpreter,
# one "key<TAB>value" per line.
import sys
import sysconfig

import torch
from torch.utils import cpp_extension

cuda = torch.version.cuda is not None


def cpu_paths(fn):
    # torch <= 2.5 takes cuda=False; later versions take device_type="cpu"
    # (the default) and refuse the old keyword.
    try:
        return fn(cuda=False)
    except TypeError:
        return fn()


out = {
    "version": torch.__version__.split("+")[0],
    "major": torch.__version__.split(".")[0],
    "includes": ";".join(cpu_paths(cpp_extension.include_paths)),
    "libdir": cpu_paths(cpp_extension.library_paths)[0],
    "cxx11_abi": int(torch._C._GLIBCXX_USE_CXX11_ABI),
    "pybind_defines": ";".join(
        f'-DPYBIND11_{k}="{getattr(torch._C, "_PYBIND11_" + k)}"'
        for k in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI")
        if getattr(torch._C, "_PYBIND11_" + k, None) is not None),
    "cuda": int(cuda),
    "cuda_include": "",
    "cuda_libdir": "",
}
if cuda:
    home = cpp_extension.CUDA_HOME or ""
    out["cuda_include"] = home + "/include" if home else ""
    out["cuda_libdir"] = home + "/lib64" if home else ""
# CUDA headers for the type check of the CUDA paths (torch-cuda-syntax),
# also with a CPU-only torch.
import glob
import os

homes = [os.environ.get("CUDA_HOME", ""), cpp_extension.CUDA_HOME or "", "/usr/local/cuda"]
homes += sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
out["cuda_headers"] = next((h + "/include" for h in homes
                            if h and os.path.exists(h + "/include/cuda_runtime_api.h")), "")
for k, v in out.items():
    print(f"{k}\t{v}")
