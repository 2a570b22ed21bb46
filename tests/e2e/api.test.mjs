// api.test.mjs - `inferd serve` driven by the official OpenAI and Anthropic
// SDKs (node:test). Started by test_api.sh, which passes the servers' URLs:
//   INFERD_URL         main server (tiny random-weight model, --ctx 1024)
//   INFERD_URL_LIMITED same model, --api-key test-key --max-seqs 1
//                      --max-queue 1 --max-open 3 (401, 429, 503)
//   INFERD_MODEL       the served model id
// Random weights make the text meaningless, so the checks are about shapes,
// counts, and equalities that must hold whatever the text is (a stream
// joins to the same text as the non-stream answer with the same seed; a
// stop string cuts the text exactly before its first occurrence).
import test from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import net from 'node:net';
import { jsonSchemaOutputFormat } from '@anthropic-ai/sdk/helpers/json-schema';

const URL = process.env.INFERD_URL;
const LIMITED = process.env.INFERD_URL_LIMITED;
const MODEL = process.env.INFERD_MODEL;
const openai = new OpenAI({ baseURL: `${URL}/v1`, apiKey: 'unused', maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: URL, apiKey: 'unused', maxRetries: 0 });
const chatMsgs = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hello.' }];

async function metrics() {
    const text = await (await fetch(`${URL}/metrics`)).text();
    const get = (name) => {
        const m = text.match(new RegExp(`^${name} ([0-9.e+-]+)$`, 'm'));
        return m ? Number(m[1]) : NaN;
    };
    return { text, get };
}

// Sends raw bytes on a fresh connection; resolves with what comes back
// until the server closes or 2 s pass.
function rawHttp(bytes) {
    const u = new globalThis.URL(URL);
    return new Promise((resolve, reject) => {
        let got = '';
        const sock = net.connect(Number(u.port), u.hostname, () => sock.write(bytes));
        sock.setTimeout(2000, () => sock.destroy());
        sock.on('data', (d) => { got += d.toString('latin1'); });
        sock.on('close', () => resolve(got));
        sock.on('error', (e) => (got ? resolve(got) : reject(e)));
    });
}

async function collectChat(stream) {
    let text = '', finish = null, usage = null, role = null;
    for await (const chunk of stream) {
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices) {
            if (c.delta.role) role = c.delta.role;
            if (c.delta.content) text += c.delta.content;
            if (c.finish_reason) finish = c.finish_reason;
        }
    }
    return { text, finish, usage, role };
}

test('GET /v1/models, /health, tokenize round trip', async () => {
    const models = await openai.models.list();
    assert.equal(models.data[0].id, MODEL);
    const h = await (await fetch(`${URL}/health`)).json();
    assert.equal(h.status, 'ok');
    const tok = await (await fetch(`${URL}/tokenize`, { method: 'POST', body: JSON.stringify({ prompt: 'hello world' }) })).json();
    assert.ok(tok.tokens.length >= 2 && tok.count === tok.tokens.length);
    const de = await (await fetch(`${URL}/detokenize`, { method: 'POST', body: JSON.stringify({ tokens: tok.tokens }) })).json();
    assert.equal(de.text, 'hello world');
});

test('chat: non-stream and stream agree (seeded sampling), usage present', async () => {
    const params = { model: MODEL, messages: chatMsgs, max_tokens: 12, temperature: 0.8, seed: 7 };
    const a = await openai.chat.completions.create(params);
    assert.equal(a.object, 'chat.completion');
    assert.equal(a.choices.length, 1);
    assert.equal(a.choices[0].message.role, 'assistant');
    assert.equal(a.choices[0].finish_reason, 'length');
    assert.equal(a.usage.completion_tokens, 12);
    assert.ok(a.usage.prompt_tokens > 5);
    assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + 12);
    const s = await collectChat(await openai.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } }));
    assert.equal(s.role, 'assistant');
    assert.equal(s.text, a.choices[0].message.content);
    assert.equal(s.finish, 'length');
    assert.deepEqual(s.usage.completion_tokens, 12);
});

test('chat: n > 1 and logprobs with top alternatives', async () => {
    const r = await openai.chat.completions.create({
        model: MODEL, messages: chatMsgs, max_tokens: 5, n: 3, logprobs: true, top_logprobs: 3,
    });
    assert.equal(r.choices.length, 3);
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
    assert.equal(r.usage.completion_tokens, 15);
    for (const c of r.choices) {
        assert.equal(c.logprobs.content.length, 5);
        for (const e of c.logprobs.content) {
            assert.ok(e.logprob <= 0 && typeof e.token === 'string');
            assert.equal(e.top_logprobs.length, 3);
            assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[2].logprob);
        }
    }
    // Streamed n > 1: every index gets its own finish.
    const stream = await openai.chat.completions.create({ model: MODEL, messages: chatMsgs, max_tokens: 4, n: 2, stream: true });
    const fin = new Set();
    for await (const ch of stream) for (const c of ch.choices) if (c.finish_reason) fin.add(c.index);
    assert.deepEqual([...fin].sort(), [0, 1]);
});

test('stop strings: text ends right before the first occurrence, streamed or not', async () => {
    const base = { model: MODEL, messages: chatMsgs, max_tokens: 24, temperature: 0 };
    const full = (await openai.chat.completions.create(base)).choices[0].message.content;
    const cps = Array.from(full);
    assert.ok(cps.length >= 8, `need some text, got ${JSON.stringify(full)}`);
    const k = Math.floor(cps.length / 2);
    const stop = cps.slice(k, k + 3).join('');
    const expected = full.slice(0, full.indexOf(stop));
    const r = await openai.chat.completions.create({ ...base, stop: [stop, 'zzzz-never'] });
    assert.equal(r.choices[0].message.content, expected);
    assert.equal(r.choices[0].finish_reason, 'stop');
    const s = await collectChat(await openai.chat.completions.create({ ...base, stop, stream: true }));
    assert.equal(s.text, expected);
    assert.equal(s.finish, 'stop');
    // Anthropic reports which stop sequence ended the message.
    const m = await anthropic.messages.create({
        model: MODEL, max_tokens: 24, temperature: 0, system: 'You are terse.',
        messages: [{ role: 'user', content: 'Say hello.' }], stop_sequences: [stop],
    });
    assert.equal(m.content[0].text, expected);
    assert.equal(m.stop_reason, 'stop_sequence');
    assert.equal(m.stop_sequence, stop);
});

test('ignore_eos: generation goes past end-of-generation tokens up to max_tokens', async () => {
    // A +100 bias on <|im_end|> makes it every token; only ignore_eos keeps going.
    const bias = { 151645: 100 };
    const stop = await openai.completions.create({ model: MODEL, prompt: 'x', max_tokens: 12, logit_bias: bias });
    assert.equal(stop.usage.completion_tokens, 1);
    assert.equal(stop.choices[0].finish_reason, 'stop');
    const go = await openai.completions.create({ model: MODEL, prompt: 'x', max_tokens: 12, logit_bias: bias, ignore_eos: true });
    assert.equal(go.usage.completion_tokens, 12);
    assert.equal(go.choices[0].finish_reason, 'length');
    await assert.rejects(openai.completions.create({ model: MODEL, prompt: 'x', max_tokens: 2, ignore_eos: 'yes' }),
        (e) => e.status === 400 && e.param === 'ignore_eos');
});

test('completions: text, token ids, arrays of prompts, logprobs, stream, echo', async () => {
    const a = await openai.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 6, logprobs: 2 });
    assert.equal(a.object, 'text_completion');
    assert.equal(a.choices[0].logprobs.tokens.length, 6);
    assert.equal(a.choices[0].logprobs.top_logprobs[0] && Object.keys(a.choices[0].logprobs.top_logprobs[0]).length, 2);
    assert.equal(a.choices[0].logprobs.tokens.join(''), a.choices[0].text);
    const ids = await openai.completions.create({ model: MODEL, prompt: [9707, 11, 1879], max_tokens: 3 });
    assert.equal(ids.usage.prompt_tokens, 3);
    const multi = await openai.completions.create({ model: MODEL, prompt: ['a b c', [1, 2, 3, 4]], max_tokens: 2, n: 2 });
    assert.equal(multi.choices.length, 4);
    assert.equal(multi.usage.completion_tokens, 8);
    let text = '';
    let fin = null;
    for await (const ch of await openai.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 6, stream: true, temperature: 0 })) {
        text += ch.choices[0]?.text ?? '';
        fin = ch.choices[0]?.finish_reason ?? fin;
    }
    const greedy = await openai.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 6, temperature: 0 });
    assert.equal(text, greedy.choices[0].text);
    assert.equal(fin, 'length');
    const echo = await openai.completions.create({ model: MODEL, prompt: 'Echo me', max_tokens: 2, echo: true, temperature: 0 });
    assert.ok(echo.choices[0].text.startsWith('Echo me'));
});

test('responses: create, stream events, store, previous_response_id, get, delete', async () => {
    const r1 = await openai.responses.create({ model: MODEL, input: 'Hello there', instructions: 'Be brief.', max_output_tokens: 6 });
    assert.equal(r1.object, 'response');
    assert.equal(r1.status, 'incomplete');
    assert.equal(r1.output[0].content[0].type, 'output_text');
    assert.equal(r1.output_text, r1.output[0].content[0].text);
    assert.equal(r1.usage.output_tokens, 6);
    const got = await openai.responses.retrieve(r1.id);
    assert.equal(got.id, r1.id);
    assert.equal(got.output[0].content[0].text, r1.output_text);
    // The second turn sees the first one: its prompt is longer by more than the new input.
    const r2 = await openai.responses.create({ model: MODEL, input: 'And again', previous_response_id: r1.id, max_output_tokens: 4 });
    assert.ok(r2.usage.input_tokens > r1.usage.input_tokens + 6, `${r2.usage.input_tokens} vs ${r1.usage.input_tokens}`);
    assert.equal(r2.previous_response_id, r1.id);
    // Streaming: the documented event order with increasing sequence numbers.
    const types = [];
    let seq = -1, deltas = '', done = null;
    for await (const ev of await openai.responses.create({ model: MODEL, input: 'Stream it', max_output_tokens: 5, stream: true })) {
        types.push(ev.type);
        assert.equal(ev.sequence_number, seq + 1);
        seq = ev.sequence_number;
        if (ev.type === 'response.output_text.delta') deltas += ev.delta;
        if (ev.type === 'response.output_text.done') done = ev.text;
    }
    const uniq = types.filter((t, i) => t !== types[i - 1]);
    assert.deepEqual(uniq, ['response.created', 'response.in_progress', 'response.output_item.added',
        'response.content_part.added', 'response.output_text.delta', 'response.output_text.done',
        'response.content_part.done', 'response.output_item.done', 'response.incomplete']);
    assert.equal(deltas, done);
    await openai.responses.delete(r1.id);
    await assert.rejects(openai.responses.retrieve(r1.id), (e) => e.status === 404);
    await assert.rejects(openai.responses.create({ model: MODEL, input: 'x', previous_response_id: r1.id }), (e) => e.status === 404);
    // store: false is not retrievable.
    const r3 = await openai.responses.create({ model: MODEL, input: 'x', store: false, max_output_tokens: 2 });
    await assert.rejects(openai.responses.retrieve(r3.id), (e) => e.status === 404);
});

test('anthropic: messages, stream events, count_tokens', async () => {
    const params = { model: MODEL, max_tokens: 8, system: [{ type: 'text', text: 'Be brief.' }], messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }], temperature: 0 };
    const m = await anthropic.messages.create(params);
    assert.equal(m.type, 'message');
    assert.equal(m.role, 'assistant');
    assert.equal(m.stop_reason, 'max_tokens');
    assert.equal(m.usage.output_tokens, 8);
    assert.ok(m.usage.input_tokens > 3);
    const types = [];
    const stream = anthropic.messages.stream(params);
    stream.on('streamEvent', (e) => types.push(e.type));
    const fin = await stream.finalMessage();
    assert.equal(fin.content[0].text, m.content[0].text);
    assert.equal(fin.stop_reason, 'max_tokens');
    const uniq = types.filter((t, i) => t !== types[i - 1]);
    assert.deepEqual(uniq, ['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
    // The SDK swallows pings; the wire has one right after content_block_start.
    const raw = await (await fetch(`${URL}/v1/messages`, { method: 'POST', body: JSON.stringify({ ...params, stream: true }) })).text();
    assert.match(raw, /^event: message_start\n[^]*event: content_block_start\n[^]*event: ping\ndata: \{"type":"ping"\}\n\n/);
    const c = await anthropic.messages.countTokens({ model: MODEL, system: 'Be brief.', messages: [{ role: 'user', content: 'Hi' }] });
    assert.equal(c.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
});

test('usage reports cached prompt tokens on a repeated long prompt', async () => {
    const long = 'The quick brown fox jumps over the lazy dog. '.repeat(12);
    const p = { model: MODEL, messages: [{ role: 'user', content: long }], max_tokens: 2 };
    const a = await openai.chat.completions.create(p);
    const b = await openai.chat.completions.create(p);
    assert.equal(b.usage.prompt_tokens, a.usage.prompt_tokens);
    assert.ok(b.usage.prompt_tokens_details.cached_tokens >= 16, JSON.stringify(b.usage));
    const m = await anthropic.messages.create({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: long }] });
    assert.ok(m.usage.cache_read_input_tokens >= 16, JSON.stringify(m.usage));
    const { get } = await metrics();
    assert.ok(get('inferd_cached_prompt_tokens_total') >= 32);
    assert.ok(get('inferd_prefix_cache_hit_ratio') > 0);
});

test('structured output: json_schema, json_object, regex, text.format; errors name the field', async () => {
    const schema = {
        type: 'object', additionalProperties: false, required: ['name', 'age', 'tags'],
        properties: {
            name: { type: 'string', maxLength: 6 },
            age: { type: 'integer', minimum: 0, maximum: 120 },
            tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 3 },
        },
    };
    for (const seed of [1, 2, 3]) {
        const r = await openai.chat.completions.create({
            model: MODEL, messages: chatMsgs, max_tokens: 400, seed, temperature: 1,
            response_format: { type: 'json_schema', json_schema: { name: 'person', schema, strict: true } },
        });
        assert.equal(r.choices[0].finish_reason, 'stop');
        const v = JSON.parse(r.choices[0].message.content);
        assert.deepEqual(Object.keys(v).sort(), ['age', 'name', 'tags']);
        assert.ok(typeof v.name === 'string' && [...v.name].length <= 6, JSON.stringify(v.name)); // code points, as JSON Schema counts
        assert.ok(Number.isInteger(v.age) && v.age >= 0 && v.age <= 120);
        assert.ok(Array.isArray(v.tags) && v.tags.length <= 3 && v.tags.every((t) => t === 'a' || t === 'b'));
        // streamed deltas reassemble to the same text
        const s = await collectChat(await openai.chat.completions.create({
            model: MODEL, messages: chatMsgs, max_tokens: 400, seed, temperature: 1, stream: true,
            response_format: { type: 'json_schema', json_schema: { name: 'person', schema } },
        }));
        assert.equal(s.text, r.choices[0].message.content);
    }
    const c = await openai.completions.create({ model: MODEL, prompt: 'x', max_tokens: 40, seed: 5, regex: '[0-9]{3}-[a-z]{2}' });
    assert.match(c.choices[0].text, /^[0-9]{3}-[a-z]{2}$/);
    const small = { type: 'object', required: ['ok'], additionalProperties: false, properties: { ok: { type: 'boolean' } } };
    const resp = await openai.responses.create({
        model: MODEL, input: 'answer', max_output_tokens: 200, store: false, temperature: 1,
        text: { format: { type: 'json_schema', name: 'r', schema: small } },
    });
    assert.equal(typeof JSON.parse(resp.output_text).ok, 'boolean');
    await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: chatMsgs,
        response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', contains: {} } } } }),
    (e) => e.status === 400 && /contains: unsupported keyword/.test(e.message));
    await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: chatMsgs,
        response_format: { type: 'xml' } }),
    (e) => e.status === 400 && e.param === 'response_format.type');
    // a forced tool call and response_format would constrain the same output
    await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: chatMsgs, tool_choice: 'required',
        response_format: { type: 'json_object' },
        tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }] }),
    (e) => e.status === 400 && e.param === 'tool_choice' && /response_format/.test(e.message));
    // tools reach the chat template: the prompt grows by the rendered definitions
    const tool = { name: 'get_weather', description: 'Weather for a city', input_schema: { type: 'object', properties: { city: { type: 'string' } } } };
    const base = await anthropic.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
    const withTools = await anthropic.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], tools: [tool] });
    assert.ok(withTools.input_tokens > base.input_tokens + 10, `${withTools.input_tokens} vs ${base.input_tokens}`);
    const chatTools = await openai.chat.completions.create({ model: MODEL, messages: chatMsgs, max_tokens: 2,
        tools: [{ type: 'function', function: { name: tool.name, description: tool.description, parameters: tool.input_schema } }] });
    const chatPlain = await openai.chat.completions.create({ model: MODEL, messages: chatMsgs, max_tokens: 2 });
    assert.ok(chatTools.usage.prompt_tokens > chatPlain.usage.prompt_tokens + 10);
    await assert.rejects(anthropic.messages.create({ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'x' }],
        tools: [tool], tool_choice: { type: 'tool', name: 'no_such_tool' } }),
    (e) => e.status === 400 && /tool_choice: names 'no_such_tool'/.test(e.message));
});

test('errors: each API schema and status', async () => {
    await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: [] }),
        (e) => e.status === 400 && e.param === 'messages' && e.type === 'invalid_request_error');
    await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: chatMsgs, temperature: 5 }),
        (e) => e.status === 400 && e.param === 'temperature');
    await assert.rejects(openai.chat.completions.create({ model: 'no-such-model', messages: chatMsgs }),
        (e) => e.status === 404 && e.param === 'model');
    await assert.rejects(openai.completions.create({ model: MODEL, prompt: [999999999], max_tokens: 1 }),
        (e) => e.status === 400);
    await assert.rejects(openai.completions.create({ model: MODEL, prompt: 'x', max_tokens: 5000 }),
        (e) => e.status === 400 && e.code === 'context_length_exceeded' && /context length/.test(e.message));
    await assert.rejects(anthropic.messages.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }] }),
        (e) => e.status === 400 && e.error?.error?.type === 'invalid_request_error' && /max_tokens/.test(e.message));
    await assert.rejects(anthropic.messages.create({ model: 'nope', max_tokens: 1, messages: [{ role: 'user', content: 'x' }] }),
        (e) => e.status === 404 && e.error?.error?.type === 'not_found_error');
    const route = await fetch(`${URL}/v1/nothing`);
    assert.equal(route.status, 404);
    assert.equal((await route.json()).error.type, 'invalid_request_error');
    const bad = await fetch(`${URL}/v1/chat/completions`, { method: 'POST', body: '{"messages": [' });
    assert.equal(bad.status, 400);
    assert.equal((await bad.json()).error.param, 'body');
    // A body over --max-body is refused from its Content-Length, before it is sent.
    const head = await rawHttp(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ${3 << 20}\r\n\r\n`);
    assert.match(head, /^HTTP\/1\.1 413 /);
    // The server is still fine.
    assert.equal((await fetch(`${URL}/health`)).status, 200);
});

// The decoder and encoder sides of tests/e2e/client_features.test.mjs (which
// also covers what needs the server's new routes and calls).
test('client features: Anthropic parse, tool-call stream shapes, text.format echo, refused fields, metadata', async () => {
    const schema = { type: 'object', additionalProperties: false, required: ['ok'], properties: { ok: { type: 'boolean' } } };
    const parsed = await anthropic.messages.parse({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: 'x' }],
        output_config: { format: jsonSchemaOutputFormat(schema) } });
    assert.equal(typeof parsed.parsed_output.ok, 'boolean');
    const fn = { type: 'function', function: { name: 'f', parameters: schema } };
    const chunks = [];
    for await (const c of await openai.chat.completions.create({ model: MODEL, messages: chatMsgs, tools: [fn], max_tokens: 100,
        tool_choice: { type: 'function', function: { name: 'f' } }, stream: true })) chunks.push(c);
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    assert.equal(chunks[0].choices[0].delta.content, null);
    assert.equal(chunks[0].choices[0].delta.tool_calls[0].function.name, 'f');
    assert.deepEqual(chunks.map((c) => c.choices[0]?.finish_reason).filter(Boolean), ['stop']);
    const format = { type: 'json_schema', name: 'r', schema, strict: true };
    const resp = await openai.responses.create({ model: MODEL, input: 'x', max_output_tokens: 100, store: false, text: { format } });
    assert.deepEqual(resp.text.format, format);
    await assert.rejects(openai.responses.create({ model: MODEL, input: 'x', store: false, background: true }),
        (e) => e.status === 400 && e.param === 'background');
    await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: chatMsgs, modalities: ['audio'] }),
        (e) => e.status === 400 && e.param === 'modalities');
    await assert.rejects(anthropic.messages.create({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'x' }],
        tools: [{ type: 'web_search_20250305', name: 'web_search' }] }),
    (e) => e.status === 400 && /^tools\[0\]: tool type 'web_search_20250305' is not supported/.test(e.error?.error?.message));
    await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: chatMsgs, metadata: { n: 1 } }),
        (e) => e.status === 400 && e.param === 'metadata.n');
});

test('limits: 401 without the key, 429 and 503 with Retry-After when full', async () => {
    const noKey = new OpenAI({ baseURL: `${LIMITED}/v1`, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(noKey.models.list(), (e) => e.status === 401 && e.type === 'authentication_error');
    const ant = new Anthropic({ baseURL: LIMITED, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(ant.messages.create({ model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: 'x' }] }),
        (e) => e.status === 401 && e.error?.error?.type === 'authentication_error');
    const body = JSON.stringify({ model: MODEL, prompt: 'busy', max_tokens: 150, temperature: 0 });
    const post = () => fetch(`${LIMITED}/v1/completions`, { method: 'POST', body, headers: { Authorization: 'Bearer test-key' } });
    const rs = await Promise.all([post(), post(), post(), post()]);
    const by = {};
    for (const r of rs) {
        by[r.status] = (by[r.status] ?? 0) + 1;
        if (r.status !== 200) {
            assert.ok(Number(r.headers.get('retry-after')) >= 1, `retry-after on ${r.status}`);
            assert.ok((await r.json()).error.type);
        } else {
            await r.json();
        }
    }
    assert.ok(by[200] >= 1 && by[429] >= 1 && by[503] >= 1, JSON.stringify(by));
});

test('client disconnect mid-stream cancels the engine request', async () => {
    const before = (await metrics()).get('inferd_engine_cancelled_total');
    const ac = new AbortController();
    const stream = await openai.chat.completions.create({ model: MODEL, messages: chatMsgs, max_tokens: 900, stream: true }, { signal: ac.signal });
    let n = 0;
    try {
        for await (const _ of stream) {
            if (++n === 3) {
                ac.abort();
                break;
            }
        }
    } catch (e) {
        assert.equal(e.name, 'APIUserAbortError');
    }
    assert.equal(n, 3);
    let m;
    for (let i = 0; i < 100; i++) {
        m = await metrics();
        if (m.get('inferd_engine_cancelled_total') > before && m.get('inferd_num_requests_running') === 0) break;
        await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(m.get('inferd_engine_cancelled_total') > before, 'engine saw the cancel');
    assert.equal(m.get('inferd_num_requests_running'), 0);
    assert.equal(m.get('inferd_kv_blocks_used'), 0);
    assert.ok(m.get('inferd_requests_cancelled_total') >= 1);
    // A non-streamed request abandoned before its answer is cancelled too.
    const before2 = m.get('inferd_engine_cancelled_total');
    const ac2 = new AbortController();
    const pending = openai.completions.create({ model: MODEL, prompt: 'go', max_tokens: 1000 }, { signal: ac2.signal });
    await new Promise((r) => setTimeout(r, 150));
    ac2.abort();
    await assert.rejects(pending);
    for (let i = 0; i < 100; i++) {
        m = await metrics();
        if (m.get('inferd_engine_cancelled_total') > before2 && m.get('inferd_num_requests_running') === 0) break;
        await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(m.get('inferd_engine_cancelled_total') > before2, 'engine saw the second cancel');
    assert.equal(m.get('inferd_kv_blocks_used'), 0);
    // Follow-up works.
    const r = await openai.chat.completions.create({ model: MODEL, messages: chatMsgs, max_tokens: 2 });
    assert.equal(r.choices[0].finish_reason, 'length');
});

test('64 concurrent streams all complete', async () => {
    const one = async (i) => collectChat(await openai.chat.completions.create({
        model: MODEL, messages: [{ role: 'user', content: `request ${i}` }], max_tokens: 8, stream: true,
        stream_options: { include_usage: true }, seed: i,
    }));
    const res = await Promise.all(Array.from({ length: 64 }, (_, i) => one(i)));
    for (const r of res) {
        assert.equal(r.finish, 'length');
        assert.equal(r.usage.completion_tokens, 8);
    }
    const { text } = await metrics();
    assert.match(text, /inferd_requests_total\{endpoint="\/v1\/chat\/completions",status="200"\} \d+/);
    assert.match(text, /inferd_time_to_first_token_seconds_count \d+/);
    // every engine request reports its queue time (submit -> first admission)
    const get = (name) => Number((text.match(new RegExp(`^${name} ([0-9.e+-]+)$`, 'm')) || [])[1]);
    assert.ok(get('inferd_queue_time_seconds_count') >= 64, 'queue time observed per request');
    assert.ok(get('inferd_queue_time_seconds_sum') > 0, 'queue time sum');
    // every step is a decode step or a prompt step, each timed
    const kind = (name, k) => Number((text.match(new RegExp(`^${name}\\{kind="${k}"\\} ([0-9.e+-]+)$`, 'm')) || [])[1]);
    const dec = kind('inferd_engine_kind_steps_total', 'decode');
    const pro = kind('inferd_engine_kind_steps_total', 'prompt');
    assert.ok(dec > 0 && pro > 0, `steps by kind: ${dec} decode, ${pro} prompt`);
    assert.equal(dec + pro, get('inferd_engine_steps_total'));
    assert.ok(kind('inferd_engine_step_seconds_total', 'decode') > 0);
    assert.ok(kind('inferd_engine_step_seconds_total', 'prompt') > 0);
    const decTokens = get('inferd_engine_decode_step_tokens_total');
    assert.ok(decTokens >= dec, 'a decode step holds at least one token');
});
