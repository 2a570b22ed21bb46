// tools.test.mjs - tool calls through the official SDKs (node:test), started
// by test_tools.sh with one server per tool-call family:
//   INFERD_TOOL_URLS  "hermes=URL,deepseek=URL,llama3=URL,mistral=URL,"
//   INFERD_MODEL      the served model id
// The models have random weights: a call only comes out when it is forced
// (tool_choice required / named / any / tool: a grammar over the family's
// wrapper and the tool's parameter schema), or when the `regex` extension
// field makes the model write the family's raw call text (the "auto" path:
// the output is parsed, nothing is forced). Checks hold whatever the model
// writes: the arguments parse and validate against the schema (ajv), and a
// stream reassembles to the non-streamed answer of the same seed.
import test from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import Ajv from 'ajv';

const MODEL = process.env.INFERD_MODEL;
const urls = Object.fromEntries((process.env.INFERD_TOOL_URLS || '').split(',').filter(Boolean)
    .map((kv) => kv.split('=')));
const clients = Object.fromEntries(Object.entries(urls).map(([fam, url]) => [fam, {
    openai: new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 }),
    anthropic: new Anthropic({ baseURL: url, apiKey: 'unused', maxRetries: 0 }),
}]));
const ajv = new Ajv({ strict: false });

const weather = {
    name: 'get_weather', description: 'Weather for a city',
    parameters: {
        type: 'object', additionalProperties: false, required: ['city', 'days'],
        properties: {
            city: { type: 'string', maxLength: 10 },
            days: { type: 'integer', minimum: 1, maximum: 7 },
            unit: { enum: ['c', 'f'] },
        },
    },
};
const search = {
    name: 'search', description: 'Search the web',
    parameters: {
        type: 'object', additionalProperties: false, required: ['q'],
        properties: {
            q: { type: 'string', maxLength: 12 },
            tags: { type: 'array', maxItems: 2, items: { type: 'string', maxLength: 4 } },
            exact: { type: 'boolean' },
        },
    },
};
const defs = [weather, search];
const chatTools = defs.map((f) => ({ type: 'function', function: f }));
const respTools = defs.map((f) => ({ type: 'function', name: f.name, description: f.description, parameters: f.parameters }));
const msgTools = defs.map((f) => ({ name: f.name, description: f.description, input_schema: f.parameters }));
const user = [{ role: 'user', content: 'What should I do?' }];
const MAX = 400; // whitespace is bounded per position; this leaves room for any schema path

function validCall(name, args) {
    const def = defs.find((d) => d.name === name);
    assert.ok(def, `unknown tool ${name}`);
    const v = typeof args === 'string' ? JSON.parse(args) : args;
    const check = ajv.compile(def.parameters);
    assert.ok(check(v), `${name} ${JSON.stringify(v)}: ${ajv.errorsText(check.errors)}`);
    return v;
}

async function chatStream(openai, body) {
    const stream = await openai.chat.completions.create({ ...body, stream: true });
    let content = '', finish = null;
    const calls = [];
    for await (const chunk of stream) {
        for (const c of chunk.choices) {
            if (c.delta.content) content += c.delta.content;
            for (const t of c.delta.tool_calls || []) {
                if (t.id) calls[t.index] = { id: t.id, name: t.function.name, arguments: '' };
                assert.ok(calls[t.index], 'argument delta before its call started');
                if (t.function?.arguments) calls[t.index].arguments += t.function.arguments;
            }
            if (c.finish_reason) finish = c.finish_reason;
        }
    }
    return { content, calls, finish };
}

function callsOf(message) {
    return (message.tool_calls || []).map((t) => ({ id: t.id, name: t.function.name, arguments: t.function.arguments }));
}

const strip = (calls) => calls.map(({ name, arguments: a }) => ({ name, arguments: a }));

for (const fam of Object.keys(clients)) {
    const { openai } = clients[fam];
    const idPattern = fam === 'mistral' ? /^[A-Za-z0-9]{9}$/ : /^call_[A-Za-z0-9]{24}$/;

    test(`${fam}: tool_choice required gives a valid call`, async () => {
        for (const seed of [1, 2, 3]) {
            const r = await openai.chat.completions.create({ model: MODEL, messages: user, tools: chatTools,
                tool_choice: 'required', max_tokens: MAX, seed });
            const ch = r.choices[0];
            assert.equal(ch.finish_reason, 'tool_calls', JSON.stringify(ch));
            assert.equal(ch.message.content, null);
            assert.equal(ch.message.tool_calls.length, 1);
            const t = ch.message.tool_calls[0];
            assert.equal(t.type, 'function');
            assert.match(t.id, idPattern);
            validCall(t.function.name, t.function.arguments);
        }
    });

    test(`${fam}: a named tool, streamed deltas equal the whole answer`, async () => {
        const body = { model: MODEL, messages: user, tools: chatTools, max_tokens: MAX, seed: 7,
            tool_choice: { type: 'function', function: { name: 'search' } } };
        const whole = await openai.chat.completions.create(body);
        const s = await chatStream(openai, body);
        const calls = callsOf(whole.choices[0].message);
        assert.equal(calls.length, 1);
        assert.equal(calls[0].name, 'search');
        validCall('search', calls[0].arguments);
        assert.deepEqual(strip(s.calls), strip(calls));
        assert.equal(s.finish, 'stop'); // OpenAI's finish reason when the request names the function
        assert.equal(whole.choices[0].finish_reason, 'stop');
        assert.equal(s.content, '');
        assert.match(s.calls[0].id, idPattern);
    });
}

// The family's raw call text, for the `regex` extension field.
const reEscape = (s) => s.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&').replace(/\n/g, '\\n');
const DS = {
    callsBegin: '<｜tool▁calls▁begin｜>', callsEnd: '<｜tool▁calls▁end｜>',
    callBegin: '<｜tool▁call▁begin｜>', callEnd: '<｜tool▁call▁end｜>', sep: '<｜tool▁sep｜>',
};
const rawCall = {
    hermes: (name, args) => `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`,
    deepseek: (name, args) => `${DS.callsBegin}${DS.callBegin}function${DS.sep}${name}\n\`\`\`json\n${JSON.stringify(args)}\n\`\`\`${DS.callEnd}${DS.callsEnd}`,
    llama3: (name, args) => JSON.stringify({ name, parameters: args }),
    mistral: (name, args) => JSON.stringify([{ name, arguments: args }]),
};

for (const fam of Object.keys(clients)) {
    const { openai } = clients[fam];
    const lead = fam === 'hermes' || fam === 'deepseek' ? 'Checking. ' : ''; // bare forms: the whole answer
    const args = { city: 'Oslo', days: 2 };
    const text = lead + rawCall[fam]('get_weather', args);

    test(`${fam}: an automatic call is parsed (stream and not)`, async () => {
        const body = { model: MODEL, messages: user, tools: chatTools, max_tokens: MAX, seed: 3, regex: reEscape(text) };
        const r = await openai.chat.completions.create(body);
        const m = r.choices[0].message;
        assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0]));
        assert.equal(m.content, lead ? lead : null);
        assert.equal(m.tool_calls.length, 1);
        assert.equal(m.tool_calls[0].function.name, 'get_weather');
        assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), args);
        const s = await chatStream(openai, body);
        assert.equal(s.content, lead);
        assert.deepEqual(strip(s.calls), strip(callsOf(m)));
    });

    test(`${fam}: unknown tools and tool_choice none leave the text as content`, async () => {
        const unknown = lead + rawCall[fam]('rm_rf', args);
        const r = await openai.chat.completions.create({ model: MODEL, messages: user, tools: chatTools,
            max_tokens: MAX, seed: 3, regex: reEscape(unknown) });
        assert.equal(r.choices[0].message.content, unknown);
        assert.equal(r.choices[0].message.tool_calls, undefined);
        assert.equal(r.choices[0].finish_reason, 'stop');
        const none = await openai.chat.completions.create({ model: MODEL, messages: user, tools: chatTools,
            tool_choice: 'none', max_tokens: MAX, seed: 3, regex: reEscape(text) });
        assert.equal(none.choices[0].message.content, text);
        assert.equal(none.choices[0].message.tool_calls, undefined);
    });
}

const hermes = clients.hermes;

test('responses: function_call items, streamed events equal the whole answer', { skip: !hermes }, async () => {
    const { openai } = hermes;
    const body = { model: MODEL, input: 'go', tools: respTools, tool_choice: 'required', max_output_tokens: MAX, seed: 5, store: false };
    const whole = await openai.responses.create(body);
    const items = whole.output.filter((o) => o.type === 'function_call');
    assert.equal(whole.output.length, 1);
    assert.equal(items.length, 1);
    const fc = items[0];
    assert.equal(fc.status, 'completed');
    assert.match(fc.call_id, /^call_/);
    assert.match(fc.id, /^fc_/);
    validCall(fc.name, fc.arguments);
    assert.equal(whole.tool_choice, 'required');
    assert.deepEqual(whole.tools.map((t) => t.name), ['get_weather', 'search']);

    const stream = await openai.responses.create({ ...body, stream: true });
    let args = '', done = null, added = null, itemDone = null, completed = null;
    for await (const ev of stream) {
        if (ev.type === 'response.output_item.added') added = ev.item;
        if (ev.type === 'response.function_call_arguments.delta') args += ev.delta;
        if (ev.type === 'response.function_call_arguments.done') done = ev.arguments;
        if (ev.type === 'response.output_item.done') itemDone = ev.item;
        if (ev.type === 'response.completed') completed = ev.response;
    }
    assert.equal(added.type, 'function_call');
    assert.equal(added.name, fc.name);
    assert.equal(args, done);
    assert.equal(done, fc.arguments);
    assert.equal(itemDone.arguments, fc.arguments);
    assert.equal(completed.output[0].arguments, fc.arguments);
});

test('messages: tool_use blocks, streamed input_json_delta equals the whole answer', { skip: !hermes }, async () => {
    const { anthropic } = hermes;
    for (const tool_choice of [{ type: 'any' }, { type: 'tool', name: 'get_weather' }]) {
        const body = { model: MODEL, max_tokens: MAX, temperature: 0, messages: user, tools: msgTools, tool_choice };
        const whole = await anthropic.messages.create(body);
        assert.equal(whole.stop_reason, 'tool_use');
        assert.equal(whole.content.length, 1);
        const tu = whole.content[0];
        assert.equal(tu.type, 'tool_use');
        assert.match(tu.id, /^toolu_/);
        if (tool_choice.name) assert.equal(tu.name, tool_choice.name);
        validCall(tu.name, tu.input);

        const stream = anthropic.messages.stream(body);
        let json = '', start = null, stops = 0;
        for await (const ev of stream) {
            if (ev.type === 'content_block_start') start = ev.content_block;
            if (ev.type === 'content_block_delta') {
                assert.equal(ev.delta.type, 'input_json_delta');
                json += ev.delta.partial_json;
            }
            if (ev.type === 'content_block_stop') stops++;
        }
        const final = await stream.finalMessage();
        assert.equal(start.type, 'tool_use');
        assert.equal(start.name, tu.name);
        assert.equal(stops, 1);
        assert.deepEqual(JSON.parse(json), tu.input);
        assert.deepEqual(final.content[0].input, tu.input);
        assert.equal(final.stop_reason, 'tool_use');
    }
});

test('multi-turn: earlier calls and tool results are accepted by all three APIs', { skip: !hermes }, async () => {
    const { openai, anthropic } = hermes;
    const call = { id: 'call_abc123456', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo","days":2}' } };
    const history = [...user, { role: 'assistant', content: null, tool_calls: [call] },
        { role: 'tool', tool_call_id: call.id, content: 'sunny, 21 C' }];
    const r = await openai.chat.completions.create({ model: MODEL, messages: history, tools: chatTools, max_tokens: 4 });
    const plain = await openai.chat.completions.create({ model: MODEL, messages: user, tools: chatTools, max_tokens: 4 });
    assert.ok(r.usage.prompt_tokens > plain.usage.prompt_tokens + 10);

    // Anthropic: tool_use / tool_result blocks render like the Chat history
    const msgs = [...user,
        { role: 'assistant', content: [{ type: 'text', text: 'Let me check.' },
            { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Oslo', days: 2 } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny, 21 C' }] }];
    const withCall = await anthropic.messages.countTokens({ model: MODEL, messages: msgs, tools: msgTools });
    const without = await anthropic.messages.countTokens({ model: MODEL, messages: user, tools: msgTools });
    assert.ok(withCall.input_tokens > without.input_tokens + 20, `${withCall.input_tokens} vs ${without.input_tokens}`);
    const a = await anthropic.messages.create({ model: MODEL, max_tokens: 4, messages: msgs, tools: msgTools });
    assert.equal(a.type, 'message');

    // Responses: a forced call, then its output through previous_response_id
    const first = await openai.responses.create({ model: MODEL, input: 'go', tools: respTools,
        tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: MAX, seed: 2 });
    const fc = first.output.find((o) => o.type === 'function_call');
    assert.equal(fc.name, 'get_weather');
    const second = await openai.responses.create({ model: MODEL, previous_response_id: first.id, tools: respTools,
        input: [{ type: 'function_call_output', call_id: fc.call_id, output: 'sunny' }], max_output_tokens: 4 });
    const alone = await openai.responses.create({ model: MODEL, tools: respTools, store: false,
        input: [{ type: 'function_call_output', call_id: fc.call_id, output: 'sunny' }], max_output_tokens: 4 });
    assert.ok(second.usage.input_tokens > alone.usage.input_tokens + 10, `${second.usage.input_tokens} vs ${alone.usage.input_tokens}`);
    // and the same turn given inline
    const inline = await openai.responses.create({ model: MODEL, tools: respTools, max_output_tokens: 4, store: false,
        input: [{ role: 'user', content: 'go' }, { type: 'function_call', call_id: fc.call_id, name: fc.name, arguments: fc.arguments },
            { type: 'function_call_output', call_id: fc.call_id, output: 'sunny' }] });
    assert.equal(inline.status === 'completed' || inline.status === 'incomplete', true);
});

test('errors: schema keywords, conflicting constraints, unknown names', { skip: !hermes }, async () => {
    const { openai, anthropic } = hermes;
    const bad = [...chatTools, { type: 'function', function: { name: 'bad', parameters: { type: 'object', properties: { x: { contains: {} } } } } }];
    await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: user, tools: bad, tool_choice: 'required', max_tokens: 8 }),
        (e) => e.status === 400 && /tools\[2\] 'bad'/.test(e.message) && /contains: unsupported keyword/.test(e.message));
    // auto never compiles the schemas: the same tools are fine
    const ok = await openai.chat.completions.create({ model: MODEL, messages: user, tools: bad, max_tokens: 2 });
    assert.equal(ok.object, 'chat.completion');
    await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: user, tools: chatTools,
        tool_choice: { type: 'function', function: { name: 'nope' } } }),
    (e) => e.status === 400 && e.param === 'tool_choice');
    await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: user, tool_choice: 'required' }),
        (e) => e.status === 400 && /no tools/.test(e.message));
    await assert.rejects(openai.responses.create({ model: MODEL, input: 'x', tools: respTools, tool_choice: 'required',
        text: { format: { type: 'json_object' } } }),
    (e) => e.status === 400 && /cannot be combined/.test(e.message));
    await assert.rejects(anthropic.messages.create({ model: MODEL, max_tokens: 4, tools: msgTools, tool_choice: { type: 'some' },
        messages: user }), (e) => e.status === 400 && /tool_choice/.test(e.message));
});

// Mistral's marker is a special token: the stream keeps it for the parser
// when tools are parsed, and drops it (as every special token) otherwise.
test('mistral: the [TOOL_CALLS] special token reaches the parser, and only then', { skip: !clients.mistral }, async () => {
    const { openai } = clients.mistral;
    const tok = await (await fetch(`${urls.mistral}/tokenize`, { method: 'POST',
        body: JSON.stringify({ prompt: '[TOOL_CALLS]', add_special: false }) })).json();
    assert.equal(tok.tokens.length, 1);
    const body = { model: MODEL, messages: user, tools: chatTools, max_tokens: 3, seed: 1,
        logit_bias: { [tok.tokens[0]]: 100 } };
    const parsed = await openai.chat.completions.create(body);
    assert.equal(parsed.choices[0].message.content, '[TOOL_CALLS]'.repeat(3));
    assert.equal(parsed.choices[0].message.tool_calls, undefined);
    const plain = await openai.chat.completions.create({ ...body, tool_choice: 'none' });
    assert.equal(plain.choices[0].message.content, '');
});
