# The runtime-log sandbox's entry point (run as `python3 -I -c <this> <command>` by root in a throwaway pod).
#
# It unpacks the log the API put in the pod's Secret to /work/app.log, then starts the command as a shell pipeline
# in a child that first leaves the pod's network for a new, empty network namespace (only a loopback device, down),
# drops to uid/gid 65534 with no capabilities, and proves both before anything of the command runs: a child that
# still sees another interface, a route or a capability fails before exec, and the command never runs. The parent keeps the 30-second
# limit and the 256 KiB output cap, prints the output, and leaves its facts as JSON in the container's termination
# message: {isolated, exit_code, timed_out, truncated, log_bytes}.
import ctypes
import gzip
import json
import os
import selectors
import shutil
import signal
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


def isolate():
    """Runs in the child between fork and exec: no network, no privileges, or no command."""
    unshare_network()
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    caps = capabilities()
    if interfaces() != ["lo"] or routes() or caps["CapEff"] or caps["CapPrm"] or caps["CapAmb"]:
        raise RuntimeError("isolation not proven")


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
