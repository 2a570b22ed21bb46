"""hostile.py - hostile clients against `inferd serve`, over raw sockets.

Usage: hostile.py PORT. Prints one "ok"/"FAIL" line per check and exits 1 on
any failure. test_hostile.sh starts the server with small limits:
--header-timeout 2 --body-timeout 2 --write-timeout 3 --max-conns 96
--max-conns-per-client 48 --stream-buffer 65536 --max-body 16777216.

Every check asserts that the hostile client is refused or bounded AND that
other clients stay served within a bound (never a speed): a /health probe
answers within PROBE_BOUND seconds while the attack runs.
"""
import json
import socket
import sys
import threading
import time

PORT = int(sys.argv[1])
PROBE_BOUND = 1.0  # seconds a /health answer may take while under attack
failures = 0


def check(cond, what):
    global failures
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures += 1


def connect(src="127.0.0.1", timeout=10.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", PORT))
    return s


_pending = {}  # socket -> bytes read past the last response


def read_response(s, timeout=10.0):
    """One whole final response (Content-Length, chunked or close-delimited;
    interim 1xx responses skipped), or what came before the peer closed.
    Bytes past it stay for the next call on the same socket. Returns
    (status, headers dict, body bytes, closed)."""
    deadline = time.time() + timeout
    data = _pending.pop(s, b"")
    closed = False

    def more():
        nonlocal data, closed
        s.settimeout(max(0.05, deadline - time.time()))
        try:
            c = s.recv(65536)
        except (socket.timeout, ConnectionResetError, OSError):
            c = b""
        if not c:
            closed = True
        data += c
        return bool(c)

    while True:
        while b"\r\n\r\n" not in data and time.time() < deadline:
            if not more():
                break
        head, sep, rest = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        try:
            st = int(lines[0].split(b" ", 2)[1])
        except (IndexError, ValueError):
            return 0, {}, data, closed
        if 100 <= st < 200 and sep:
            data = rest
            continue
        break
    hdrs = {}
    for l in lines[1:]:
        k, _, v = l.partition(b":")
        hdrs[k.strip().lower().decode()] = v.strip().decode("latin1")

    def need(pred):
        nonlocal rest, data
        while not pred() and time.time() < deadline and not closed:
            n0 = len(data)
            if not more():
                break
            rest += data[n0:]

    if "content-length" in hdrs:
        n = int(hdrs["content-length"])
        need(lambda: len(rest) >= n)
        body, left = rest[:n], rest[n:]
    elif hdrs.get("transfer-encoding") == "chunked":
        need(lambda: b"\r\n0\r\n\r\n" in rest or rest.startswith(b"0\r\n\r\n"))
        body, buf = b"", rest
        while buf:
            size, _, buf = buf.partition(b"\r\n")
            n = int(size, 16) if size else 0
            if n == 0:
                buf = buf[2:]
                break
            body += buf[:n]
            buf = buf[n + 2:]
        left = buf
    else:
        need(lambda: False)
        body, left = rest, b""
    if left:
        _pending[s] = left
    return st, hdrs, body, closed


def exchange(raw, src="127.0.0.1", timeout=10.0):
    s = connect(src, timeout)
    try:
        s.sendall(raw)
        return read_response(s, timeout)
    finally:
        s.close()


def closed_after(s, timeout=3.0):
    s.settimeout(timeout)
    try:
        while True:
            c = s.recv(65536)
            if not c:
                return True
    except (socket.timeout, OSError):
        return False


def json_error(body):
    try:
        v = json.loads(body)
    except ValueError:
        return None
    e = v.get("error") if isinstance(v, dict) else None
    return e.get("message") if isinstance(e, dict) else None


def health_time():
    t0 = time.time()
    try:
        st, _, _, _ = exchange(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", timeout=5)
    except OSError:
        st = 0
    return st, time.time() - t0


class Prober:
    """Times /health every 50 ms in a thread while an attack runs."""

    def __init__(self):
        self.worst, self.bad, self.n = 0.0, 0, 0
        self.stop = False
        self.t = threading.Thread(target=self.run)

    def run(self):
        while not self.stop:
            st, dt = health_time()
            self.n += 1
            self.worst = max(self.worst, dt)
            if st != 200:
                self.bad += 1
            time.sleep(0.05)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *a):
        self.stop = True
        self.t.join()

    def report(self, what):
        check(self.n > 0 and self.bad == 0 and self.worst < PROBE_BOUND,
              f"{what}: /health served {self.n} times, worst {self.worst * 1000:.0f} ms, "
              f"{self.bad} failed")


def post(path, obj, extra=b""):
    body = json.dumps(obj).encode()
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s"
            b"Content-Length: %d\r\n\r\n%s" % (path.encode(), extra, len(body), body))


# ------------------------------------------------------------ smuggling
for name, raw in [
    ("duplicate Content-Length",
     b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"
     b"aaaaaGET /health HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("conflicting Content-Length",
     b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 40\r\n\r\n"
     b"aaaaaGET /health HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("Content-Length with Transfer-Encoding",
     b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("bad chunk size",
     b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"zz\r\nhello\r\n0\r\n\r\n"),
    ("chunk size overflow (400 or 413)",
     b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"ffffffffffffffffff\r\nhello\r\n0\r\n\r\n"),
    ("unknown Transfer-Encoding",
     b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked, x\r\n\r\n"),
]:
    s = connect()
    s.sendall(raw)
    st, hdrs, body, closed = read_response(s, 5)
    gone = closed or closed_after(s)
    s.close()
    check(st in ((400, 413) if "413" in name else (400,)) and json_error(body) and
          "x-request-id" in hdrs and gone,
          f"{name}: {st}, JSON error {json_error(body)!r}, connection closed {gone}")

# --------------------------------------------------- strict HTTP basics
s = connect()
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
a = read_response(s, 5)
b = read_response(s, 5)
s.close()
check(a[0] == 200 and b"status" in a[2] and b[0] == 200 and b"list" in b[2],
      f"pipelined requests answered in order ({a[0]}, {b[0]})")
st, hdrs, body, _ = exchange(b"PUT /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
check(st == 405 and "GET" in hdrs.get("allow", "") and json_error(body),
      f"PUT on a GET route: {st}, Allow: {hdrs.get('allow')}")
st, hdrs, body, _ = exchange(b"GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n")
check(st == 405 and "POST" in hdrs.get("allow", ""), f"GET on a POST route: {st}")
st, hdrs, body, _ = exchange(b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n", timeout=3)
check(st == 200 and int(hdrs.get("content-length", "0")) > 0 and body == b"",
      f"HEAD /health: {st}, Content-Length {hdrs.get('content-length')}, no body")
st, hdrs, body, _ = exchange(b"OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n")
check(st == 204 and "POST" in hdrs.get("allow", ""), f"OPTIONS: {st}, Allow {hdrs.get('allow')}")
st, hdrs, _, _ = exchange(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: abc-123\r\n\r\n")
check(hdrs.get("x-request-id") == "abc-123", f"x-request-id echoed: {hdrs.get('x-request-id')}")
st, hdrs, _, _ = exchange(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
check(len(hdrs.get("x-request-id", "")) >= 8, f"x-request-id made: {hdrs.get('x-request-id')}")
st, hdrs, body, _ = exchange(b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
check(st == 404 and json_error(body) and hdrs.get("x-request-id"), f"unknown path: {st}")
st, _, body, _ = exchange(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
check(st == 431 and json_error(body), f"20 KB header over --max-headers: {st}")
st, _, body, _ = exchange(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999"
                          b"\r\n\r\n")
check(st == 413 and json_error(body), f"announced body over --max-body: {st}")

# Half-close: the request, then shutdown(SHUT_WR): the answer still comes.
s = connect()
s.sendall(post("/v1/completions", {"prompt": "hi", "max_tokens": 4}))
s.shutdown(socket.SHUT_WR)
st, _, body, _ = read_response(s, 20)
s.close()
check(st == 200 and b"text_completion" in body, f"half-closed client gets its answer: {st}")

# ----------------------------------------------------------------- CORS
st, hdrs, body, _ = exchange(post("/v1/completions", {"prompt": "hi", "max_tokens": 1},
                                  b"Origin: http://evil.example\r\n"))
check(st == 403 and json_error(body) and "access-control-allow-origin" not in hdrs,
      f"cross-site POST from a foreign origin: {st} {json_error(body)!r}")
body = b'{"prompt":"hi","max_tokens":1}'
st, hdrs, _, _ = exchange(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Type: text/plain\r\nOrigin: http://evil.example\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
check(st == 403, f"'simple' text/plain cross-site POST: {st}")
st, hdrs, _, _ = exchange(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
check(st == 200, f"a POST without Origin or Content-Type (curl -d): {st}")
own = b"http://127.0.0.1:%d" % PORT
st, hdrs, _, _ = exchange(b"OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: %s\r\n"
                          b"Access-Control-Request-Method: POST\r\n"
                          b"Access-Control-Request-Headers: content-type, authorization\r\n\r\n"
                          % own)
check(st == 204 and hdrs.get("access-control-allow-origin") == own.decode() and
      "POST" in hdrs.get("access-control-allow-methods", ""),
      f"preflight from the server's own origin: {st}, {hdrs.get('access-control-allow-origin')}")
st, hdrs, _, _ = exchange(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nOrigin: %s\r\n\r\n" % own)
check(st == 200 and hdrs.get("access-control-allow-origin") == own.decode(),
      f"GET from the server's own origin carries Access-Control-Allow-Origin: {st}")

# ------------------------------------------------ slowloris, slow bodies
with Prober() as p:
    slow = []
    for _ in range(40):
        s = connect()
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        slow.append(s)
    t0 = time.time()
    alive = list(slow)
    # Keep trickling a header byte every 0.3 s: an idle timer would never
    # fire; the header deadline (2 s) must.
    while alive and time.time() - t0 < 8:
        nxt = []
        for s in alive:
            try:
                s.sendall(b"X")
                nxt.append(s)
            except OSError:
                pass
        alive = nxt
        time.sleep(0.3)
    elapsed = time.time() - t0
    for s in slow:
        s.close()
p.report("40 slowloris clients")
check(not alive, f"slowloris clients cut off at the header deadline ({elapsed:.1f} s; 2 s deadline)")

s = connect()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
t0 = time.time()
st = 0
try:
    for _ in range(30):
        s.sendall(b" ")
        time.sleep(0.2)
        s.settimeout(0.01)
        try:
            if s.recv(1, socket.MSG_PEEK):
                break
        except socket.timeout:
            pass
        except OSError:
            break
    st, _, body, _ = read_response(s, 3)
except OSError:
    pass
s.close()
check(st == 408 and time.time() - t0 < 5, f"trickled body: {st} after {time.time() - t0:.1f} s")

# ----------------------------------------------------- connection caps
conns = [connect("127.0.0.2") for _ in range(48)]
time.sleep(0.2)
st, _, body, closed = exchange(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", src="127.0.0.2")
check(st == 429 and json_error(body), f"client over --max-conns-per-client: {st}")
st, _ = health_time()
check(st == 200, f"another client is still served: {st}")
more = [connect("127.0.0.3") for _ in range(48)]  # 96 open: the cap
time.sleep(0.2)
st, _, body, _ = exchange(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", src="127.0.0.4")
check(st == 503 and json_error(body), f"connection over --max-conns: {st}")
for s in conns + more:
    s.close()
time.sleep(0.3)
st, _ = health_time()
check(st == 200, f"served again once connections closed: {st}")

# -------------------------------------------- a huge prompt, timed health
big = "word " * (8 * 1024 * 1024 // 5)
with Prober() as p:
    st, _, body, _ = exchange(post("/v1/completions", {"prompt": big, "max_tokens": 4}),
                              timeout=60)
p.report("an 8 MiB prompt")
check(st == 400 and b"context_length_exceeded" in body, f"8 MiB prompt refused: {st} {json_error(body)!r}")

# ------------------------------------ pathological grammars next to streams
def stream_gaps(n_tokens, out):
    """One stream; appends its largest gap between token events (s)."""
    s = connect(timeout=120)
    s.sendall(post("/v1/completions", {"prompt": "go", "max_tokens": n_tokens, "stream": True,
                                       "logit_bias": {"151645": -100}}))
    buf, last, worst, done = b"", None, 0.0, False
    s.settimeout(120)
    while not done:
        try:
            c = s.recv(65536)
        except OSError:
            break
        if not c:
            break
        now = time.time()
        buf += c
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if b"[DONE]" in ev:
                done = True
            elif b'"text"' in ev:
                if last is not None:
                    worst = max(worst, now - last)
                last = now
    s.close()
    out.append(worst)


gaps = []
streams = [threading.Thread(target=stream_gaps, args=(300, gaps)) for _ in range(4)]
for t in streams:
    t.start()
time.sleep(0.5)
hostile_grammars = [
    ("(.*){200}x", {"regex": "(.*){200}x"}),
    ("((a?b?){30}){30}", {"regex": "((a?b?){30}){30}"}),
    ("a 20,000-rule GBNF chain",
     {"grammar": "root ::= r0\n" + "".join("r%d ::= \"a\" r%d\n" % (i, i + 1)
                                            for i in range(20000)) + "r20000 ::= \"b\"\n"}),
]
for name, extra in hostile_grammars:
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 8}
    body.update(extra)
    t0 = time.time()
    st, _, rbody, _ = exchange(post("/v1/chat/completions", body), timeout=60)
    dt = time.time() - t0
    msg = json_error(rbody)
    check((st == 200) or (st == 400 and msg and ("fragment" in msg or "rule" in msg)),
          f"grammar {name}: {st} in {dt:.2f} s {msg!r:.120}")
for t in streams:
    t.join()
check(len(gaps) == 4 and max(gaps) < 2.0,
      f"4 streams next to the grammars: largest gap between tokens {max(gaps) * 1000:.0f} ms "
      f"(bound 2 s)")

# ------------------------------------------------------- slow readers
def metric(name):
    _, _, body, _ = exchange(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    for l in body.decode("latin1").splitlines():
        if l.startswith(name + " "):
            return float(l.split()[1])
    return None


s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(("127.0.0.1", PORT))
s.sendall(post("/v1/completions", {"prompt": "go", "max_tokens": 3000, "n": 4, "stream": True,
                                   "logprobs": 5, "logit_bias": {"151645": -100}}))
time.sleep(0.5)
a = metric("inferd_engine_decode_step_tokens_total")
stalled = False
for _ in range(40):  # the stream fills the socket and the buffer, then pauses
    time.sleep(0.25)
    b = metric("inferd_engine_decode_step_tokens_total")
    if b == a:
        stalled = True
        break
    a = b
check(stalled, "a stream whose client stops reading stops generating")
t0 = time.time()
running = None
while time.time() - t0 < 10:
    _, _, body, _ = exchange(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    running = json.loads(body).get("running")
    if running == 0:
        break
    time.sleep(0.2)
s.close()
check(running == 0, f"... and is cancelled after the write timeout ({time.time() - t0:.1f} s)")

st, _ = health_time()
check(st == 200, "healthy at the end")
sys.exit(1 if failures else 0)
