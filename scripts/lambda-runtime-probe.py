"""Measures a Lambda function binary's start: serves the Lambda Runtime API on
127.0.0.1, starts the binary, and reports the init duration (process start to its
first `invocation/next`, which is when Lambda's INIT phase ends), the invocation's
duration and result, and the process's peak RSS (VmHWM). With BALLAST_PROBE_COLD=1 the
binary is dropped from the page cache first, as on a Lambda cold start. Used by
scripts/bench-package."""
import json, os, subprocess, sys, threading, time
from http.server import BaseHTTPRequestHandler, HTTPServer

binary, event_file = sys.argv[1], sys.argv[2]
event = open(event_file, "rb").read()
state = {"next_calls": 0, "init_end": None, "response": None, "done": threading.Event(), "measured": threading.Event()}

class Api(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.endswith("/runtime/invocation/next"):
            state["next_calls"] += 1
            if state["next_calls"] == 1:
                state["init_end"] = time.monotonic()
                state["invoked"] = time.monotonic()
                self.send_response(200)
                self.send_header("Lambda-Runtime-Aws-Request-Id", "bench-1")
                self.send_header("Lambda-Runtime-Deadline-Ms", str(int(time.time() * 1000) + 60000))
                self.send_header("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:eu-west-1:123456789012:function:bench")
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(event)
            else:
                state["measured"].wait(30)  # hold the second poll until the process is measured
                self.send_response(500)
                self.end_headers()

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        state["response"] = (self.path.rsplit("/", 1)[-1], body.decode(errors="replace"))
        state["finished"] = time.monotonic()
        self.send_response(202)
        self.end_headers()
        state["done"].set()

server = HTTPServer(("127.0.0.1", 0), Api)
threading.Thread(target=server.serve_forever, daemon=True).start()
env = dict(os.environ, AWS_LAMBDA_RUNTIME_API=f"127.0.0.1:{server.server_port}",
           AWS_LAMBDA_FUNCTION_NAME="bench", AWS_LAMBDA_FUNCTION_MEMORY_SIZE="128", AWS_LAMBDA_FUNCTION_VERSION="$LATEST")
def resident_share(path):
    """The share of the file's pages in the page cache (mincore(2))."""
    import ctypes, mmap
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        # Private and writable only so ctypes can take its address; nothing is written.
        m = mmap.mmap(f.fileno(), size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    libc = ctypes.CDLL(None, use_errno=True)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * pages)()
    first = ctypes.c_char.from_buffer(m)
    rc = libc.mincore(ctypes.c_void_p(ctypes.addressof(first)), ctypes.c_size_t(size), vec)
    del first
    m.close()
    if rc != 0:
        raise OSError(ctypes.get_errno(), "mincore")
    return sum(v & 1 for v in vec) / pages

cold = os.environ.get("BALLAST_PROBE_COLD") == "1"
if cold:
    # A cold start as Lambda's: the binary is not in the page cache. Dropping its clean
    # pages (no process maps it) makes the kernel read it from disk again at exec.
    # A freshly linked binary's pages are dirty until written back, and dirty pages are
    # not dropped: write them first.
    fd = os.open(binary, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
resident_at_start = resident_share(binary)
if cold and resident_at_start > 0.01:
    sys.exit(f"{binary}: {resident_at_start:.0%} still in the page cache after dropping it")
start = time.monotonic()
# BALLAST_PROBE_WRAPPER (e.g. "valgrind --tool=massif") runs the binary under a tool.
wrapper = os.environ.get("BALLAST_PROBE_WRAPPER", "").split()
proc = subprocess.Popen(wrapper + [binary], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
state["done"].wait(300 if wrapper else 60)
time.sleep(2 if wrapper else 0.05)
peak_kb, anon_kb, file_kb = 0, 0, 0
read_bytes, major_faults = None, None
try:
    # What the process read from storage (not the page cache) and its major faults: a
    # cold start must have read its binary.
    for line in open(f"/proc/{proc.pid}/io"):
        if line.startswith("read_bytes:"):
            read_bytes = int(line.split()[1])
    major_faults = int(open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[9])
    for line in open(f"/proc/{proc.pid}/status"):
        if line.startswith("VmHWM:"):
            peak_kb = int(line.split()[1])
        elif line.startswith("RssAnon:"):
            anon_kb = int(line.split()[1])
        elif line.startswith("RssFile:"):
            file_kb = int(line.split()[1])
finally:
    state["measured"].set()
    proc.terminate() if wrapper else proc.kill()
    proc.wait()
    server.shutdown()
kind, body = state["response"] or ("none", "")
try:
    # Records or events the function reports as failed (an SQS batch's
    # batchItemFailures, a direct invocation's errors); None for a body not JSON.
    answer = json.loads(body)
    failed = len(answer.get("batchItemFailures") or []) + len(answer.get("errors") or [])
except (ValueError, AttributeError):
    failed = None
print(json.dumps({
    "init_ms": round((state["init_end"] - start) * 1000, 1) if state["init_end"] else None,
    "invoke_ms": round((state["finished"] - state["invoked"]) * 1000, 1) if state.get("finished") else None,
    "peak_rss_mb": round(peak_kb / 1024, 1),
    "rss_anon_mb": round(anon_kb / 1024, 1),
    "rss_file_mb": round(file_kb / 1024, 1),
    "cold": cold,
    "read_mb": round(read_bytes / 1e6, 1) if read_bytes is not None else None,
    "major_faults": major_faults,
    "resident_at_start_pct": round(100 * resident_at_start, 1),
    "result": kind,
    "failed": failed,
    "body": body[:200],
}))
if cold and not read_bytes and not major_faults:
    sys.exit(f"{binary}: a cold start that read nothing from storage (read_bytes 0, no major fault)")
