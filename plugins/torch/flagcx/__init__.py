"""flagcx for PyTorch: ``import flagcx`` registers the torch.distributed backend "flagcx".

    import torch.distributed as dist
    import flagcx
    dist.init_process_group("flagcx")           # CPU tensors; CUDA ones on a GPU build
    dist.init_process_group("cpu:gloo,cuda:flagcx")   # torch 2.x: one backend per device

Launchers: torchrun sets RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT itself.  Under
MPICH's or Open MPI's mpiexec, call ``flagcx.env_from_mpi()`` before
init_process_group (it maps PMI_RANK/PMI_SIZE and friends to torch's names).
"""
import inspect
import os

import torch
import torch.distributed as dist

from . import _C
from ._C import ProcessGroupFlagcx
from ._version import __version__

__all__ = ["ProcessGroupFlagcx", "device", "version", "api_version", "env_from_mpi", "BACKEND",
           "__version__"]

BACKEND = "flagcx"


def device():
    """The device flagcx drives in this process: 'host' or the GPU vendor."""
    return _C.device()


def version():
    """The flagcx release this module belongs to, as 'major.minor.patch'
    (``__version__``: the library's version, also its pkg-config and CMake
    version)."""
    return __version__


def api_version():
    """What flagcxGetVersion reports, as 'major.minor.patch': the FlagCX API
    level the library implements (README, "Versions")."""
    v = _C.version()
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}"


def _create(store, rank, size, timeout):
    return ProcessGroupFlagcx(store, rank, size, timeout)


def _register():
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    params = inspect.signature(dist.Backend.register_backend).parameters
    if "devices" in params:
        # torch 2.x: one backend object per device type of a process group.
        devices = ["cpu", "cuda"] if _C.cuda else ["cpu"]
        dist.Backend.register_backend(BACKEND, _create, devices=devices)
    else:
        dist.Backend.register_backend(BACKEND, _create)


def env_from_mpi(master_addr="127.0.0.1"):
    """Fills RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE from an MPI
    launcher's variables (MPICH/Hydra: PMI_RANK, PMI_SIZE, MPI_LOCALRANKID,
    MPI_LOCALNRANKS; Open MPI: OMPI_COMM_WORLD_*) where torch's are unset, and
    MASTER_ADDR with `master_addr`.  MASTER_PORT must be set by the caller
    (e.g. ``mpiexec -n 2 -env MASTER_PORT 29500 ...``).  Returns (rank, world_size)."""
    env = os.environ
    sources = {
        "RANK": ("PMI_RANK", "OMPI_COMM_WORLD_RANK"),
        "WORLD_SIZE": ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"),
        "LOCAL_RANK": ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK"),
        "LOCAL_WORLD_SIZE": ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    }
    for name, names in sources.items():
        if name in env:
            continue
        for src in names:
            if src in env:
                env[name] = env[src]
                break
    if "RANK" not in env or "WORLD_SIZE" not in env:
        raise RuntimeError("flagcx.env_from_mpi: no RANK/WORLD_SIZE and no MPI launcher "
                           "variables (PMI_RANK/PMI_SIZE or OMPI_COMM_WORLD_RANK/SIZE)")
    env.setdefault("LOCAL_RANK", env["RANK"])
    env.setdefault("MASTER_ADDR", master_addr)
    if "MASTER_PORT" not in env:
        raise RuntimeError("flagcx.env_from_mpi: MASTER_PORT is not set (pass it to the "
                           "launcher, e.g. mpiexec -env MASTER_PORT 29500)")
    return int(env["RANK"]), int(env["WORLD_SIZE"])


def _register_shrunk_as_custom():
    """torch.distributed.shrink_group (torch >= 2.10) registers the new
    group's backend under BackendType GLOO when the group is bound to no CUDA
    device, whatever the backend is.  DDP's logger then takes a backend of a
    "gloo" group for a ProcessGroupGloo (a static_cast in
    Logger::set_env_variables) and the process crashes in the DDP
    constructor (torch 2.11, shrink_test.py --api torch).  A flagcx backend is
    registered again as CUSTOM, the type init_process_group("flagcx") gives
    it; other backends are left as torch made them."""
    c10d = dist.distributed_c10d
    make = getattr(c10d, "_create_shrunk_process_group", None)
    if make is None or getattr(make, "_flagcx", False):
        return

    def create(new_backend, *args, **kwargs):
        pg = make(new_backend, *args, **kwargs)
        if isinstance(new_backend, ProcessGroupFlagcx):
            custom = dist.ProcessGroup.BackendType.CUSTOM
            dev = getattr(pg, "bound_device_id", None) or torch.device("cpu")
            pg._register_backend(dev, custom, new_backend)
            pg._set_default_backend(custom)
        return pg

    create._flagcx = True
    c10d._create_shrunk_process_group = create


_register()
_register_shrunk_as_custom()
