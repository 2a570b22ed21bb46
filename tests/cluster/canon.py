"""The canonical outcome of one API request, for comparing a cluster's
answers with `inferd serve`'s bitwise: the texts, tokens, logprobs and
alternatives of every choice (a stream's deltas joined), or the status of
an error. Used by the cluster test scripts:

    python3 canon.py PORT CASE [PROMPT_TOKENS OUTPUT_TOKENS SALT]

CASE: greedy (completion, logprobs), seeded (two choices, a penalty),
chat (a seeded stream with logprobs), json (a seeded JSON-schema chat).
SALT varies the prompts, so that no cache holds them yet."""
import json
import sys
import urllib.error
import urllib.request


def case(name, n_prompt=120, n_out=200, salt=0):
    """(path, body) of one of the fixed cases, on model "tiny"."""
    prompt = [(7919 * (salt + 1) + i * 104729) % 150 + 10 for i in range(n_prompt)]
    words = " ".join("wave%d" % ((i * 37 + salt) % 101) for i in range(60))
    if name == "greedy":
        return "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": n_out,
                                   "temperature": 0, "logprobs": 3, "ignore_eos": True}
    if name == "seeded":
        return "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": n_out,
                                   "temperature": 0.9, "top_p": 0.95, "seed": 11, "n": 2,
                                   "presence_penalty": 0.4, "logprobs": 2, "ignore_eos": True}
    if name == "chat":
        return "/v1/chat/completions", {
            "model": "tiny", "stream": True, "max_tokens": n_out, "temperature": 0.7, "seed": 3,
            "logprobs": True, "top_logprobs": 2,
            "messages": [{"role": "user", "content": "Say something about these: " + words}]}
    if name == "json":
        return "/v1/chat/completions", {
            "model": "tiny", "max_tokens": n_out, "temperature": 0.8, "seed": 5,
            "messages": [{"role": "user", "content": "A point, please, given " + words}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {
                "type": "object",
                "properties": {"x": {"type": "integer"}, "tag": {"type": "string"}},
                "required": ["x", "tag"], "additionalProperties": False}}}}
    raise SystemExit(f"canon.py: unknown case '{name}'")


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


if __name__ == "__main__":
    port, name = int(sys.argv[1]), sys.argv[2]
    sizes = [int(x) for x in sys.argv[3:6]]
    print(canon(port, *case(name, *sizes)))
