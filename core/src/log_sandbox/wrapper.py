# The runtime-log sandbox's entry point (run as `python3 -I -c <this> <command>` by root in a throwaway pod).
#
# It unpacks the log the API put in the pod's Secret to /work/app.log, then starts the command as a shell pipeline
# in a child that first leaves the pod's network for a new, empty network namespace (only a loopback device, down),
# drops to uid/gid 65534 with no capabilities under a seccomp filter that closes namespace and mount calls, and
# proves all of it before anything of the command runs: a child that still sees an interface up, a route, a
# capability or a way to a new user namespace fails before exec, and the command never runs. The parent keeps the
# 30-second limit and the 256 KiB output cap, prints the output, and leaves its facts as JSON in the container's
# termination message: {isolated, exit_code, timed_out, truncated, log_bytes}.
import ctypes
import fcntl
import gzip
import json
import os
import platform
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

# The pod mounts the log at /in, the work directory at /work; tests of this script point ROOT elsewhere.
ROOT = os.environ.get("SLIPWAY_SANDBOX_ROOT", "")
LIMIT_SECONDS = 30.0
OUTPUT_CAP = 256 * 1024
NOBODY = 65534
NOT_ISOLATED = 3


def finish(**facts):
    with open(ROOT + "/dev/termination-log", "w") as message:
        json.dump(facts, message)


def interfaces():
    with open("/proc/self/net/dev") as dev:
        return [line.split(":")[0].strip() for line in dev.readlines()[2:]]


def up(name):
    """Whether the interface is up (SIOCGIFFLAGS)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sH14x", name.encode()[:15], 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(probe, 0x8913, request))[1]
    return bool(flags & 1)


def usable_interfaces():
    """Interfaces that are up. A new namespace holds a loopback device, down, and may hold the fallback devices of
    tunnel modules the node has loaded (tunl0, sit0, ip6tnl0), also down; none of them carries anything."""
    return [name for name in interfaces() if up(name)]


def routes():
    """Routes through any device but the loopback (a new namespace holds only the kernel's IPv6 reject routes)."""
    found = []
    with open("/proc/self/net/route") as v4:
        found += [line for line in v4.readlines()[1:] if line.split()[0] != "lo"]
    try:
        with open("/proc/self/net/ipv6_route") as v6:
            found += [line for line in v6 if line.split()[-1] != "lo"]
    except FileNotFoundError:
        pass
    return found


def capabilities():
    with open("/proc/self/status") as status:
        return {
            key: int(value, 16)
            for key, value in (line.split(":\t") for line in status if line.startswith("Cap"))
        }


def unshare_network():
    if hasattr(os, "unshare"):
        os.unshare(os.CLONE_NEWNET)
        return
    clone_newnet = 0x40000000
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(clone_newnet) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")


# The pod holds SYS_ADMIN (to make the network namespace), and the runtime's default seccomp profile opens the
# namespace and mount calls to a container that holds it. The command gets a filter of its own that closes them
# again: no new namespace of any kind (so no user namespace with capabilities inside it), no joining one, no mounts,
# no BPF, perf, keyring or userfaultfd. clone3 answers ENOSYS, so libc falls back to clone, whose flags the filter
# can read. Syscall numbers per architecture; any other architecture refuses to run commands.
SYSCALLS = {
    # machine: (audit arch, denied calls, clone, clone3)
    "x86_64": (0xC000003E, [272, 308, 165, 166, 155, 321, 298, 250, 248, 249, 323, 304, 428, 429, 430, 431, 432, 442], 56, 435),
    "aarch64": (0xC00000B7, [97, 268, 40, 39, 41, 280, 241, 219, 217, 218, 282, 265, 428, 429, 430, 431, 432, 442], 220, 435),
}
NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
X32_BIT = 0x40000000


def seccomp_filter():
    """The filter as classic BPF: check the architecture, then the call, then clone's flags."""
    arch, denied, clone, clone3 = SYSCALLS[platform.machine()]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ/JGE/JSET|K, BPF_RET|K
    allow, kill = 0x7FFF0000, 0x80000000
    deny, enosys = 0x00050000 | 1, 0x00050000 | 38  # SECCOMP_RET_ERRNO with EPERM, ENOSYS
    m = len(denied)
    clone_flags, allow_at, deny_at, enosys_at, kill_at = 7 + m, 6 + m, 10 + m, 11 + m, 12 + m

    def jump(pc, code, k, target):
        return (code, target - pc - 1, 0, k)

    program = [
        (ld, 0, 0, 4),  # seccomp_data.arch
        (jeq, 0, kill_at - 2, arch),
        (ld, 0, 0, 0),  # seccomp_data.nr
        jump(3, jge, X32_BIT, deny_at),
    ]
    program += [jump(4 + i, jeq, nr, deny_at) for i, nr in enumerate(denied)]
    program += [
        jump(4 + m, jeq, clone3, enosys_at),
        jump(5 + m, jeq, clone, clone_flags),
        (ret, 0, 0, allow),
        (ld, 0, 0, 16),  # args[0], low 32 bits: clone's flags
        jump(8 + m, jset, NAMESPACE_FLAGS, deny_at),
        (ret, 0, 0, allow),
        (ret, 0, 0, deny),
        (ret, 0, 0, enosys),
        (ret, 0, 0, kill),
    ]
    assert len(program) == kill_at + 1 and program[allow_at][0] == ret
    return b"".join(struct.pack("HBBI", *instruction) for instruction in program)


def install_seccomp():
    code = seccomp_filter()
    buffer = ctypes.create_string_buffer(code)
    prog = struct.pack("HP", len(code) // 8, ctypes.addressof(buffer))
    prog_buffer = ctypes.create_string_buffer(prog)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
    if libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.addressof(prog_buffer), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def namespaces_closed():
    """Whether the filter holds: a new user namespace is refused."""
    libc = ctypes.CDLL(None, use_errno=True)
    clone_newuser = 0x10000000
    return libc.unshare(clone_newuser) != 0 and ctypes.get_errno() == 1


def isolate():
    """Runs in the child between fork and exec: no network, no privileges, no namespaces, or no command."""
    unshare_network()
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    install_seccomp()
    caps = capabilities()
    if usable_interfaces() or routes() or caps["CapEff"] or caps["CapPrm"] or caps["CapAmb"]:
        raise RuntimeError("isolation not proven")
    if not namespaces_closed():
        raise RuntimeError("namespace calls not closed")


def main():
    command = sys.argv[1]
    with gzip.open(ROOT + "/in/app.log.gz") as packed, open(ROOT + "/work/app.log", "wb") as log:
        shutil.copyfileobj(packed, log)
    log_bytes = os.path.getsize(ROOT + "/work/app.log")
    for path in ("/work", "/work/app.log"):
        os.chown(ROOT + path, NOBODY, NOBODY)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "TMPDIR": "/tmp"}
    try:
        # An exception in isolate() reaches here as SubprocessError, and bash never starts.
        child = subprocess.Popen(
            ["bash", "-c", command],
            cwd=ROOT + "/work",
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=isolate,
        )
    except subprocess.SubprocessError as refused:
        print(f"sandbox refused: {refused}", file=sys.stderr)
        finish(isolated=False)
        sys.exit(NOT_ISOLATED)
    deadline = time.monotonic() + LIMIT_SECONDS
    output = bytearray()
    truncated = timed_out = False
    selector = selectors.DefaultSelector()
    selector.register(child.stdout, selectors.EVENT_READ)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        if not selector.select(timeout=left):
            continue
        chunk = os.read(child.stdout.fileno(), 65536)
        if not chunk:
            break
        room = max(OUTPUT_CAP - len(output), 0)
        output += chunk[:room]
        truncated = truncated or len(chunk) > room
    if not timed_out:
        try:
            child.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            timed_out = True
    # Whatever the command left running goes with the sandbox.
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait()
    code = child.returncode
    sys.stdout.buffer.write(output)
    sys.stdout.flush()
    finish(
        isolated=True,
        exit_code=None if timed_out else (code if code >= 0 else 128 - code),
        timed_out=timed_out,
        truncated=truncated,
        log_bytes=log_bytes,
    )


main()
