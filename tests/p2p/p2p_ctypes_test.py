#!/usr/bin/env python3
"""The C ABI of flagcx_p2p.h (flagcxP2pRpc*) from Python through ctypes, as a
transfer framework would use it: one engine serves its own RPC port, connects
to it by "host:port", and writes between two registered buffers by absolute
address.  usage: FLAGCX_SOCKET_IFNAME=lo FLAGCX_SOCKET_FAMILY=AF_INET p2p_ctypes_test.py LIBFLAGCX"""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
lib.flagcxP2pRpcEngineCreate.restype = ctypes.c_void_p
lib.flagcxP2pRpcEngineDestroy.argtypes = [ctypes.c_void_p]
lib.flagcxP2pRpcGetPort.argtypes = [ctypes.c_void_p]
lib.flagcxP2pRpcStartServer.argtypes = [ctypes.c_void_p]
lib.flagcxP2pRpcRegister.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64,
                                     ctypes.POINTER(ctypes.c_uint64)]
lib.flagcxP2pRpcRegisterHost.argtypes = lib.flagcxP2pRpcRegister.argtypes
lib.flagcxP2pRpcGetConn.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
lib.flagcxP2pRpcGetConn.restype = ctypes.c_void_p
u64p = ctypes.POINTER(ctypes.c_uint64)
lib.flagcxP2pRpcBatchWriteSync.argtypes = [ctypes.c_void_p, ctypes.c_int, u64p, u64p, u64p]

engine = lib.flagcxP2pRpcEngineCreate()
assert engine, "engine"
port = lib.flagcxP2pRpcGetPort(engine)
assert 0 < port < 65536, port
assert lib.flagcxP2pRpcStartServer(engine) == 0
n = 1 << 20
src = ctypes.create_string_buffer(bytes((i * 7 + 3) % 251 for i in range(n)), n)
dst = ctypes.create_string_buffer(n)
mr = ctypes.c_uint64()
assert lib.flagcxP2pRpcRegisterHost(engine, ctypes.addressof(src), n, ctypes.byref(mr)) == 0
assert lib.flagcxP2pRpcRegister(engine, ctypes.addressof(dst), n, ctypes.byref(mr)) == 0

# The engine listens on loopback (the test sets FLAGCX_SOCKET_IFNAME=lo and
# FLAGCX_SOCKET_FAMILY=AF_INET), so its session is 127.0.0.1:port.
session = f"127.0.0.1:{port}".encode()
conn = lib.flagcxP2pRpcGetConn(engine, session)
assert conn, "GetConn"
assert lib.flagcxP2pRpcGetConn(engine, session) == conn, "cached"

half = n // 2
srcs = (ctypes.c_uint64 * 2)(ctypes.addressof(src), ctypes.addressof(src) + half)
dsts = (ctypes.c_uint64 * 2)(ctypes.addressof(dst) + half, ctypes.addressof(dst))
sizes = (ctypes.c_uint64 * 2)(half, half)
assert lib.flagcxP2pRpcBatchWriteSync(conn, 2, srcs, dsts, sizes) == 0
assert dst.raw[half:] == src.raw[:half] and dst.raw[:half] == src.raw[half:], "bytes"
bad = (ctypes.c_uint64 * 1)(ctypes.addressof(dst) + n - 8)
one = (ctypes.c_uint64 * 1)(64)
assert lib.flagcxP2pRpcBatchWriteSync(conn, 1, srcs, bad, one) != 0, "past the region"
lib.flagcxP2pRpcEngineDestroy(engine)
print("ctypes: C ABI ok")
