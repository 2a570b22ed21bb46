"""The canonical outcome of one API request, for comparing a cluster's
answers with `inferd serve`'s bitwise: the texts, tokens, logprobs and
alternatives of every choice (a stream's deltas joined), or the status of
an error. Used by the cluster test scripts."""
import json
import urllib.error
import urllib.request


def canon(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            raw = r.read().decode()
    except urllib.error.HTTPError as e:
        return "status %d %s" % (e.code, json.loads(e.read()).get("error", {}).get("type"))
    if body.get("stream"):
        text, lps = "", []
        for line in raw.splitlines():
            if line.startswith("data: {"):
                d = json.loads(line[6:])
                for c in d.get("choices", []):
                    text += c.get("delta", {}).get("content") or ""
                    for t in (c.get("logprobs") or {}).get("content") or []:
                        lps.append([t["token"], t["logprob"],
                                    [x["logprob"] for x in t["top_logprobs"]]])
        return json.dumps([text, lps])
    d = json.loads(raw)
    out = []
    for c in d["choices"]:
        out.append([c.get("text") or c.get("message", {}).get("content"), c.get("logprobs"),
                    c.get("finish_reason")])
    return json.dumps([out, d["usage"]["completion_tokens"]])
