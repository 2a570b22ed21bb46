"""http_robustness.py - hostile HTTP against `inferd serve` (raw sockets).

Usage: http_robustness.py PORT. Prints one "ok"/"FAIL" line per check and
exits 1 on any failure. The server runs with --idle-timeout 2 and
--header-timeout 2 --max-headers 8192 (see test_http_robustness.sh).

Checks: malformed request lines and headers get a 4xx (never a crash or a
silent drop), oversized headers and bodies are refused, unsupported methods
are refused, a client that sends half a request and stalls (slowloris) is
disconnected at the header deadline while others are served meanwhile, a
client that vanishes mid-stream does not disturb the server, and after
everything /health still answers.
"""
import socket
import sys
import time

PORT = int(sys.argv[1])
failures = 0


def check(cond, what):
    global failures
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures += 1


def exchange(data, timeout=5.0, half_close=False):
    s = socket.create_connection(("127.0.0.1", PORT), timeout=timeout)
    try:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not chunk:
                break
            out += chunk
            if b"\r\n\r\n" in out and b"Content-Length:" in out:
                head, _, body = out.partition(b"\r\n\r\n")
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        if len(body) >= int(line.split(b":")[1]):
                            return out
        return out
    finally:
        s.close()


def status(resp):
    try:
        return int(resp.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def health():
    return status(exchange(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")) == 200


r = exchange(b"NONSENSE\r\n\r\n")
check(400 <= status(r) < 500, f"garbage request line -> {status(r)}")
r = exchange(b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n")
check(400 <= status(r) < 600 or r == b"", f"unknown HTTP version -> {status(r)} (or closed)")
r = exchange(b"GET /health HTTP/1.1\r\nNo colon here\r\n\r\n")
check(400 <= status(r) < 500, f"header without a colon -> {status(r)}")
r = exchange(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
check(status(r) in (400, 413, 431) or r == b"", f"20 KB header over --max-headers -> {status(r)}")
r = exchange(b"PUT /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
check(status(r) in (405, 501), f"PUT -> {status(r)}")
r = exchange(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n")
check(status(r) == 413, f"Content-Length beyond --max-body -> {status(r)}")
r = exchange(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
check(400 <= status(r) < 500 or r == b"", f"bad Content-Length -> {status(r)}")
body = b'{"messages":[{"role":"user","content":"\xff\xfe"}]}'
r = exchange(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
             % (len(body), body))
check(status(r) == 400 and b'"param":"body"' in r, f"invalid UTF-8 JSON -> {status(r)}")
chunked = b'{"prompt":"hi","max_tokens":1}'
r = exchange(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
             b"%x\r\n%s\r\n0\r\n\r\n" % (len(chunked), chunked))
check(status(r) == 200 and b"text_completion" in r, f"chunked request body -> {status(r)}")
check(health(), "server healthy after malformed requests")

# Slowloris: half a request, then silence. The server must drop it after the
# header deadline, and keep serving others in the meantime.
slow = socket.create_connection(("127.0.0.1", PORT), timeout=10)
slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
t0 = time.time()
check(health(), "served while a slow client stalls")
slow.settimeout(10)
try:
    got = slow.recv(4096)
except (ConnectionResetError, socket.timeout):
    got = b""
elapsed = time.time() - t0
check(elapsed < 8, f"stalled client dropped after {elapsed:.1f} s (header deadline 2 s)")
slow.close()

# Vanishing clients: streams abandoned mid-flight, and requests abandoned
# before the answer.
for i in range(8):
    s = socket.create_connection(("127.0.0.1", PORT), timeout=5)
    b = b'{"prompt":"go","max_tokens":500,"stream":%s}' % (b"true" if i % 2 else b"false")
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
              % (len(b), b))
    if i % 2:
        s.recv(100)
    s.close()
time.sleep(0.5)
check(health(), "healthy after abandoned requests")
deadline = time.time() + 20
running = None
while time.time() < deadline:
    m = exchange(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").decode("latin1")
    running = [l for l in m.splitlines() if l.startswith("inferd_num_requests_running ")]
    used = [l for l in m.splitlines() if l.startswith("inferd_kv_blocks_used ")]
    if running and running[0].endswith(" 0") and used and used[0].endswith(" 0"):
        break
    time.sleep(0.2)
check(running and running[0].endswith(" 0"), f"abandoned requests end in the engine ({running})")
sys.exit(1 if failures else 0)
