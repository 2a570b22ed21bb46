// client_features.test.mjs - client features the official SDKs use beyond
// generation (node:test): models.retrieve and Anthropic's models shape,
// responses.inputItems.list, Anthropic structured outputs (messages.parse),
// the context-length error, the shapes of tool-call streams, refused fields
// and metadata limits. Run against one server:
//   INFERD_URL    a server like test_api.sh's main one: the tiny random-weight
//                 qwen3 model (Hermes tool calls), a response store
//   INFERD_MODEL  the served model id
// e.g. INFERD_URL=http://127.0.0.1:8080 INFERD_MODEL=tiny \
//          node --test tests/e2e/client_features.test.mjs
// Random weights make the text meaningless: structured output and forced
// tool calls come from grammars, and every check is about shapes.
import test from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { jsonSchemaOutputFormat } from '@anthropic-ai/sdk/helpers/json-schema';

const URL = process.env.INFERD_URL;
const MODEL = process.env.INFERD_MODEL;
const openai = new OpenAI({ baseURL: `${URL}/v1`, apiKey: 'unused', maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: URL, apiKey: 'unused', maxRetries: 0 });
const chatMsgs = [{ role: 'user', content: 'Say hello.' }];
const rfc3339 = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/;

async function getJson(path, headers = {}) {
    const r = await fetch(`${URL}${path}`, { headers });
    return { status: r.status, body: await r.json() };
}

test('models: OpenAI retrieve and list; the Anthropic shape with anthropic-version', async () => {
    const m = await openai.models.retrieve(MODEL);
    assert.equal(m.id, MODEL);
    assert.equal(m.object, 'model');
    assert.equal(typeof m.created, 'number');
    assert.equal(typeof m.owned_by, 'string');
    const list = await openai.models.list();
    assert.deepEqual(list.data.map((x) => x.id), [MODEL]);
    assert.equal(list.data[0].object, 'model');
    await assert.rejects(openai.models.retrieve('no-such-model'),
        (e) => e.status === 404 && e.code === 'model_not_found' && e.param === 'model' && e.type === 'invalid_request_error');

    const a = await anthropic.models.retrieve(MODEL);
    assert.equal(a.type, 'model');
    assert.equal(a.id, MODEL);
    assert.equal(typeof a.display_name, 'string');
    assert.match(a.created_at, rfc3339);
    assert.ok(!Number.isNaN(Date.parse(a.created_at)));
    assert.equal(a.object, undefined);
    const page = await anthropic.models.list();
    assert.deepEqual(page.data.map((x) => x.id), [MODEL]);
    assert.equal(page.data[0].type, 'model');
    assert.equal(page.has_more, false);
    assert.equal(page.first_id, MODEL);
    assert.equal(page.last_id, MODEL);
    const all = [];
    for await (const x of anthropic.models.list()) all.push(x.id);
    assert.deepEqual(all, [MODEL]);
    await assert.rejects(anthropic.models.retrieve('no-such-model'),
        (e) => e.status === 404 && e.error?.type === 'error' && e.error?.error?.type === 'not_found_error');
    // the header picks the shape, for raw clients too
    const raw = await getJson(`/v1/models/${encodeURIComponent(MODEL)}`, { 'anthropic-version': '2023-06-01' });
    assert.equal(raw.status, 200);
    assert.equal(raw.body.type, 'model');
    const plain = await getJson(`/v1/models/${encodeURIComponent(MODEL)}`);
    assert.equal(plain.body.object, 'model');
});

test('responses: input_items of a stored response, paged by the SDK', async () => {
    const r1 = await openai.responses.create({ model: MODEL, input: 'first question', instructions: 'Be brief.', max_output_tokens: 3 });
    const r2 = await openai.responses.create({
        model: MODEL, previous_response_id: r1.id, max_output_tokens: 3,
        input: [{ role: 'user', content: [{ type: 'input_text', text: 'second question' }] }],
    });
    // default order desc: this turn's input first, then the earlier turn
    const page = await openai.responses.inputItems.list(r2.id);
    const texts = page.data.map((it) => it.content?.[0]?.text);
    assert.equal(page.data.length, 3);
    assert.equal(texts[0], 'second question');
    assert.equal(page.data[0].role, 'user');
    assert.equal(page.data[0].content[0].type, 'input_text');
    assert.equal(page.data[1].role, 'assistant');
    assert.equal(page.data[1].content[0].type, 'output_text');
    assert.equal(page.data[1].content[0].text, r1.output_text);
    assert.equal(texts[2], 'first question');
    assert.ok(page.data.every((it) => it.type === 'message' && typeof it.id === 'string' && it.id.length > 0));
    assert.equal(new Set(page.data.map((it) => it.id)).size, 3);
    assert.equal(page.has_more, false);
    // instructions are not input items
    assert.ok(!texts.includes('Be brief.'));
    // asc, one per page: the SDK follows `after` through every page
    const seen = [];
    for await (const it of openai.responses.inputItems.list(r2.id, { order: 'asc', limit: 1 })) seen.push(it.id);
    assert.deepEqual(seen, page.data.map((it) => it.id).reverse());
    const first = await openai.responses.inputItems.list(r2.id, { order: 'asc', limit: 1 });
    assert.equal(first.data.length, 1);
    assert.equal(first.has_more, true);
    // include is accepted (nothing to add to text items)
    const inc = await openai.responses.inputItems.list(r1.id, { include: ['message.input_image.image_url'] });
    assert.equal(inc.data.length, 1);
    // bad parameters name themselves; unknown responses are 404
    for (const [q, param] of [['limit=0', 'limit'], ['limit=101', 'limit'], ['order=sideways', 'order'], ['after=msg_nope', 'after']]) {
        const bad = await getJson(`/v1/responses/${r2.id}/input_items?${q}`);
        assert.equal(bad.status, 400, q);
        assert.equal(bad.body.error.param, param, q);
        assert.equal(bad.body.error.type, 'invalid_request_error');
    }
    await assert.rejects(openai.responses.inputItems.list('resp_no_such'), (e) => e.status === 404);
});

test('anthropic: structured outputs through messages.parse and beta output_format', async () => {
    const schema = {
        type: 'object', additionalProperties: false, required: ['answer', 'sure'],
        properties: { answer: { type: 'integer', minimum: 0, maximum: 99 }, sure: { type: 'boolean' } },
    };
    const msg = await anthropic.messages.parse({
        model: MODEL, max_tokens: 200, messages: [{ role: 'user', content: 'What is 2+2?' }],
        output_config: { format: jsonSchemaOutputFormat(schema) },
    });
    assert.equal(msg.stop_reason, 'end_turn');
    assert.ok(Number.isInteger(msg.parsed_output.answer) && msg.parsed_output.answer <= 99, JSON.stringify(msg.parsed_output));
    assert.equal(typeof msg.parsed_output.sure, 'boolean');
    // the beta's parse sends output_config.format too, with the structured-outputs beta header
    const beta = await anthropic.beta.messages.parse({
        model: MODEL, max_tokens: 200, messages: [{ role: 'user', content: 'What is 2+2?' }],
        output_format: jsonSchemaOutputFormat(schema),
    });
    assert.equal(typeof beta.parsed_output.sure, 'boolean');
    // the deprecated top-level output_format, as raw clients send it
    const raw = await fetch(`${URL}/v1/messages`, {
        method: 'POST', headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
        body: JSON.stringify({ model: MODEL, max_tokens: 200, messages: [{ role: 'user', content: 'x' }], output_format: { type: 'json_schema', schema } }),
    });
    const body = await raw.json();
    assert.equal(raw.status, 200);
    assert.equal(typeof JSON.parse(body.content[0].text).sure, 'boolean');
    // streamed: the text deltas join to a valid answer
    const stream = anthropic.messages.stream({
        model: MODEL, max_tokens: 200, messages: [{ role: 'user', content: 'x' }],
        output_config: { format: { type: 'json_schema', schema } },
    });
    const final = await stream.finalMessage();
    assert.equal(typeof JSON.parse(final.content[0].text).sure, 'boolean');
    await assert.rejects(anthropic.messages.create({ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'x' }],
        output_config: { format: { type: 'json_schema' } } }),
    (e) => e.status === 400 && /output_config\.format\.schema/.test(e.message));
});

test('a prompt over the context: 400 context_length_exceeded, in each API', async () => {
    const info = await openai.models.retrieve(MODEL);
    const ctx = info.context_length;
    assert.ok(ctx > 0);
    const long = 'hello '.repeat(ctx + 50);
    await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: long }] }),
        (e) => e.status === 400 && e.code === 'context_length_exceeded' && e.param === 'messages' &&
            e.type === 'invalid_request_error' &&
            new RegExp(`^This model's maximum context length is ${ctx} tokens\\. However, your messages resulted in \\d+ tokens`).test(e.error?.message));
    await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: chatMsgs, max_tokens: ctx }),
        (e) => e.status === 400 && e.code === 'context_length_exceeded' && /in the completion/.test(e.message));
    await assert.rejects(openai.completions.create({ model: MODEL, prompt: 'x', max_tokens: 5000 }),
        (e) => e.status === 400 && e.code === 'context_length_exceeded' && e.param === 'prompt' &&
            /maximum context length is \d+ tokens, however you requested/.test(e.message));
    await assert.rejects(openai.responses.create({ model: MODEL, input: long, store: false }),
        (e) => e.status === 400 && e.code === 'context_length_exceeded' && e.param === 'input');
    await assert.rejects(anthropic.messages.create({ model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: long }] }),
        (e) => e.status === 400 && e.error?.error?.type === 'invalid_request_error' &&
            new RegExp(`prompt is too long: \\d+ tokens > ${ctx - 1} maximum`).test(e.error.error.message));
    await assert.rejects(anthropic.messages.create({ model: MODEL, max_tokens: ctx, messages: [{ role: 'user', content: 'x' }] }),
        (e) => e.status === 400 && /input length and `max_tokens` exceed context limit/.test(e.message));
});

const weather = {
    type: 'function',
    function: {
        name: 'get_weather', description: 'Weather for a city',
        parameters: { type: 'object', additionalProperties: false, required: ['city'], properties: { city: { type: 'string', maxLength: 8 } } },
    },
};

async function chunksOf(body) {
    const chunks = [];
    for await (const c of await openai.chat.completions.create({ ...body, stream: true })) chunks.push(c);
    return chunks;
}

test('streams: a tool-call turn opens with content null; finish reasons of forced calls', async () => {
    const base = { model: MODEL, messages: chatMsgs, tools: [weather], max_tokens: 200, seed: 4 };
    const named = { ...base, tool_choice: { type: 'function', function: { name: 'get_weather' } } };
    const chunks = await chunksOf(named);
    const first = chunks[0].choices[0].delta;
    assert.equal(first.role, 'assistant');
    assert.equal(first.content, null);
    assert.equal(first.tool_calls[0].function.name, 'get_weather');
    assert.ok(chunks.every((c) => c.choices.every((ch) => ch.delta.content !== '')), 'no empty content delta');
    const finish = chunks.flatMap((c) => c.choices.map((ch) => ch.finish_reason)).filter(Boolean);
    assert.deepEqual(finish, ['stop']); // OpenAI's finish reason for a named function
    const whole = await openai.chat.completions.create(named);
    assert.equal(whole.choices[0].finish_reason, 'stop');
    assert.equal(whole.choices[0].message.content, null);
    assert.equal(whole.choices[0].message.tool_calls.length, 1);
    const required = await openai.chat.completions.create({ ...base, tool_choice: 'required' });
    assert.equal(required.choices[0].finish_reason, 'tool_calls');
    const rs = await chunksOf({ ...base, tool_choice: 'required' });
    assert.equal(rs[0].choices[0].delta.content, null);
    assert.deepEqual(rs.flatMap((c) => c.choices.map((ch) => ch.finish_reason)).filter(Boolean), ['tool_calls']);
    // a text answer with tools on still opens with role and content ""
    const text = await chunksOf({ ...base, max_tokens: 3, tool_choice: 'none' });
    assert.equal(text[0].choices[0].delta.role, 'assistant');
    assert.equal(text[0].choices[0].delta.content, '');
});

test('parallel_tool_calls: false ends the answer after its first call', async () => {
    // the regex extension makes the random model write two Hermes calls
    const call = (city) => `<tool_call>\n${JSON.stringify({ name: 'get_weather', arguments: { city } })}\n</tool_call>`;
    const re = (call('Oslo') + call('Rome')).replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&').replace(/\n/g, '\\n');
    const body = { model: MODEL, messages: chatMsgs, tools: [weather], max_tokens: 200, seed: 1, regex: re };
    const two = await openai.chat.completions.create(body);
    assert.equal(two.choices[0].message.tool_calls.length, 2);
    const one = await openai.chat.completions.create({ ...body, parallel_tool_calls: false });
    assert.equal(one.choices[0].message.tool_calls.length, 1);
    assert.equal(JSON.parse(one.choices[0].message.tool_calls[0].function.arguments).city, 'Oslo');
    assert.equal(one.choices[0].finish_reason, 'tool_calls');
    const resp = await openai.responses.create({ model: MODEL, input: 'x', store: false, max_output_tokens: 8, parallel_tool_calls: false });
    assert.equal(resp.parallel_tool_calls, false);
});

test('responses: text.format is echoed as sent', async () => {
    const format = { type: 'json_schema', name: 'flag', description: 'a flag', strict: true,
        schema: { type: 'object', additionalProperties: false, required: ['ok'], properties: { ok: { type: 'boolean' } } } };
    const r = await openai.responses.create({ model: MODEL, input: 'x', max_output_tokens: 100, store: false, text: { format } });
    assert.deepEqual(r.text.format, format);
    let created = null, completed = null;
    for await (const ev of await openai.responses.create({ model: MODEL, input: 'x', max_output_tokens: 100, store: false, text: { format }, stream: true })) {
        if (ev.type === 'response.created') created = ev.response;
        if (ev.type === 'response.completed') completed = ev.response;
    }
    assert.deepEqual(created.text.format, format);
    assert.deepEqual(completed.text.format, format);
    const plain = await openai.responses.create({ model: MODEL, input: 'x', max_output_tokens: 2, store: false });
    assert.deepEqual(plain.text.format, { type: 'text' });
});

test('fields inferd does not implement are refused by name', async () => {
    const chat = [
        ['audio', { modalities: ['text', 'audio'], audio: { voice: 'alloy', format: 'wav' } }],
        ['web_search_options', { web_search_options: {} }],
        ['reasoning_effort', { reasoning_effort: 'high' }],
        ['functions', { functions: [{ name: 'f', parameters: { type: 'object' } }] }],
    ];
    for (const [param, extra] of chat)
        await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: chatMsgs, max_tokens: 2, ...extra }),
            (e) => e.status === 400 && e.param === param && e.type === 'invalid_request_error', param);
    const responses = [
        ['background', { background: true }],
        ['conversation', { conversation: 'conv_123' }],
        ['prompt', { prompt: { id: 'pmpt_123' } }],
        ['tools[0]', { tools: [{ type: 'web_search' }] }],
        ['tools[0]', { tools: [{ type: 'file_search', vector_store_ids: ['vs_1'] }] }],
        ['tools[0]', { tools: [{ type: 'code_interpreter', container: { type: 'auto' } }] }],
        ['tools[0]', { tools: [{ type: 'mcp', server_label: 'x', server_url: 'https://example.com' }] }],
        ['tools[0]', { tools: [{ type: 'image_generation' }] }],
        ['reasoning.effort', { reasoning: { effort: 'high' } }],
    ];
    for (const [param, extra] of responses)
        await assert.rejects(openai.responses.create({ model: MODEL, input: 'x', max_output_tokens: 2, store: false, ...extra }),
            (e) => e.status === 400 && e.param === param, param);
    const an = { model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'x' }] };
    const messages = [
        ['tools[0]', { tools: [{ type: 'web_search_20250305', name: 'web_search' }] }],
        ['tools[0]', { tools: [{ type: 'code_execution_20250825', name: 'code_execution' }] }],
        ['tools[0]', { tools: [{ type: 'bash_20250124', name: 'bash' }] }],
        ['thinking', { thinking: { type: 'enabled', budget_tokens: 1024 } }],
        ['container', { container: 'cntr_1' }],
    ];
    for (const [param, extra] of messages)
        await assert.rejects(anthropic.messages.create({ ...an, ...extra }),
            (e) => e.status === 400 && e.error?.error?.type === 'invalid_request_error' && e.error.error.message.startsWith(`${param}:`), param);
    await assert.rejects(anthropic.beta.messages.create({ ...an, mcp_servers: [{ type: 'url', url: 'https://example.com', name: 'x' }] }),
        (e) => e.status === 400 && /^mcp_servers:/.test(e.error?.error?.message));
    // values that ask for nothing pass
    const ok = await openai.chat.completions.create({ model: MODEL, messages: chatMsgs, max_tokens: 2,
        modalities: ['text'], audio: null, reasoning_effort: 'none', service_tier: 'auto', store: false,
        prompt_cache_key: 'k', parallel_tool_calls: true, prediction: { type: 'content', content: 'hello' } });
    assert.equal(ok.choices.length, 1);
    const rok = await openai.responses.create({ model: MODEL, input: 'x', max_output_tokens: 2, store: false,
        background: false, truncation: 'disabled', reasoning: { effort: 'none' }, include: ['reasoning.encrypted_content'] });
    assert.equal(rok.status, 'incomplete');
    const aok = await anthropic.messages.create({ ...an, thinking: { type: 'disabled' }, service_tier: 'auto', mcp_servers: [] });
    assert.equal(aok.type, 'message');
});

test('metadata: OpenAI limits on Chat and Responses, Anthropic user_id', async () => {
    const big = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v']));
    const cases = [
        [big, 'metadata'],
        [{ ['k'.repeat(65)]: 'v' }, `metadata.${'k'.repeat(65)}`],
        [{ ['é'.repeat(65)]: 'v' }, 'metadata.é'],
        [{ note: 'v'.repeat(513) }, 'metadata.note'],
        [{ count: 3 }, 'metadata.count'],
    ];
    for (const [metadata, param] of cases) {
        await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: chatMsgs, max_tokens: 2, metadata }),
            (e) => e.status === 400 && e.param.startsWith(param), param);
        await assert.rejects(openai.responses.create({ model: MODEL, input: 'x', max_output_tokens: 2, store: false, metadata }),
            (e) => e.status === 400 && e.param.startsWith(param), param);
    }
    const fine = Object.fromEntries(Array.from({ length: 16 }, (_, i) => [`${i}`.padStart(64, 'k'), 'v'.repeat(512)]));
    const r = await openai.responses.create({ model: MODEL, input: 'x', max_output_tokens: 2, store: false, metadata: fine });
    assert.deepEqual(r.metadata, fine);
    const an = { model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'x' }] };
    await assert.rejects(anthropic.messages.create({ ...an, metadata: { user_id: 'u'.repeat(257) } }),
        (e) => e.status === 400 && /^metadata\.user_id:/.test(e.error?.error?.message));
    await assert.rejects(anthropic.messages.create({ ...an, metadata: { session: 's' } }),
        (e) => e.status === 400 && /^metadata\.session:/.test(e.error?.error?.message));
    const ok = await anthropic.messages.create({ ...an, metadata: { user_id: 'user-1' } });
    assert.equal(ok.type, 'message');
});
