# Run as root inside a sandbox (tests/reliability/hostile.sh, s_channel_garbage): every way
# code there could take over the agent (PID 1) to send b3osd frames of its own. Prints one JSON
# object: each way and the error it met, or "allowed". The channel's fds are host sockets only
# PID 1 holds (reopening them is refused: the shell half of the section), and the agent cannot
# be traced, read or written: gVisor refuses to trace the sandbox's init, and runs the agent
# with nothing that would lend its memory. If one of these were ever allowed, b3osd still
# treats the agent as untrusted (daemon/agentlink/channel.cc; the agent_fuzz target).
import ctypes
import json
import os

libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long
libc.syscall.restype = ctypes.c_long
libc.process_vm_writev.restype = ctypes.c_ssize_t
libc.process_vm_readv.restype = ctypes.c_ssize_t


def outcome(r):
    return os.strerror(ctypes.get_errno()) if r < 0 else "allowed"


class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


out = {}
out["ptrace_attach"] = outcome(libc.ptrace(16, 1, None, None))  # PTRACE_ATTACH
out["ptrace_seize"] = outcome(libc.ptrace(0x4206, 1, None, None))  # PTRACE_SEIZE
buf = ctypes.create_string_buffer(8)
local, remote = IoVec(ctypes.cast(buf, ctypes.c_void_p), 8), IoVec(0x400000, 8)
out["process_vm_writev"] = outcome(libc.process_vm_writev(1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
out["process_vm_readv"] = outcome(libc.process_vm_readv(1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
try:
    os.close(os.open("/proc/1/mem", os.O_RDWR))
    out["proc_mem"] = "allowed"
except OSError as e:
    out["proc_mem"] = e.strerror
out["pidfd_open"] = outcome(libc.syscall(434, 1, 0))  # then pidfd_getfd would copy its fds
print(json.dumps(out))
