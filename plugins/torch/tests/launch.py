"""Runs a test script on N ranks with MPICH's mpiexec: picks a free TCP port
for torch's store and passes MASTER_ADDR/MASTER_PORT through the environment
(the scripts map PMI_RANK/PMI_SIZE with flagcx.env_from_mpi()).

    launch.py -n 2 script.py [args...]
"""
import os
import shutil
import socket
import subprocess
import sys


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    args = sys.argv[1:]
    if len(args) < 3 or args[0] != "-n":
        sys.exit("usage: launch.py -n N script.py [args...]")
    n = args[1]
    mpiexec = shutil.which("mpiexec")
    if not mpiexec:
        sys.exit("launch.py: mpiexec not found")
    env = dict(os.environ)
    env["MASTER_ADDR"] = "127.0.0.1"
    env["MASTER_PORT"] = str(free_port())
    env.setdefault("UCX_NET_DEVICES", "lo")
    cmd = [mpiexec, "-n", n, sys.executable] + args[2:]
    print("+ MASTER_PORT=%s %s" % (env["MASTER_PORT"], " ".join(cmd)), flush=True)
    sys.exit(subprocess.call(cmd, env=env))


if __name__ == "__main__":
    main()
