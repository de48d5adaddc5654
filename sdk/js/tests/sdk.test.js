// The SDK under plain Node.js: `node --import ./testing/register.js --test tests/`.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { test } from 'node:test';

import {
  Denied,
  Failed,
  InvalidArguments,
  Json,
  NotFound,
  Plugin,
  Text,
  canonicalJson,
  log,
  want,
} from '../cordon_sdk.js';
import { records } from '../testing/host/log.js';
import { wanted } from '../testing/host/grant-wanted.js';

const schema = { type: 'object', properties: { n: { type: 'integer' } } };

function plugin() {
  return new Plugin()
    .tool('text', { description: 'Returns text.', inputSchema: schema }, () => 'hello')
    .tool('nothing', { description: 'Returns nothing.' }, () => undefined)
    .tool('value', { description: 'Returns a value.' }, ({ n }) => ({ n, list: [1, 2] }))
    .tool('pieces', { description: 'Returns pieces.' }, () => [new Text('a'), new Json([1])])
    .tool('mixed', { description: 'A bug.' }, () => [new Text('a'), 5])
    .tool('denied', { description: 'Refuses.' }, () => {
      throw new Denied('outside the grant');
    })
    .tool('crash', { description: 'A bug.' }, () => {
      throw new TypeError('x is undefined');
    })
    .tool('rejects', { description: 'An async bug.' }, async () => {
      await null;
      throw 'a string';
    })
    .tool('not_json', { description: 'A bug.' }, () => ({ big: 10n }))
    .tool(
      'typed',
      {
        description: 'Promises an object.',
        outputSchema: { type: 'object', properties: { ok: { type: 'boolean' } } },
      },
      ({ n }) => (n ? { ok: true } : 'not an object'),
    );
}

test('results become content pieces', async () => {
  const p = plugin();
  assert.deepEqual(await p.call('text', {}), [new Text('hello')]);
  assert.deepEqual(await p.call('nothing', {}), []);
  assert.deepEqual(await p.call('value', '{"n": 3}'), [new Json({ n: 3, list: [1, 2] })]);
  assert.deepEqual(await p.call('pieces', {}), [new Text('a'), new Json([1])]);
  await assert.rejects(p.call('mixed', {}), Failed);
  await assert.rejects(p.call('not_json', {}), /not JSON/);
});

test('every failure is a tool error, and an unplanned one goes to the log', async () => {
  const p = plugin();
  await assert.rejects(p.call('denied', {}), Denied);
  records.length = 0;
  await assert.rejects(p.call('crash', {}), (e) => e instanceof Failed && /TypeError: x is undefined/.test(e.message));
  assert.equal(records[0].level, 'error');
  assert.ok(records[0].fields.some(([k]) => k === 'stack'));
  await assert.rejects(p.call('rejects', {}), (e) => e instanceof Failed && /a string/.test(e.message));
  await assert.rejects(p.call('absent', {}), (e) => e instanceof NotFound && /it offers: text, nothing/.test(e.message));
  await assert.rejects(p.call('text', '{"n": '), InvalidArguments);
  await assert.rejects(p.call('text', '[1]'), InvalidArguments);
  await assert.rejects(p.call('typed', { n: 0 }), /did not return exactly one JSON object/);
  assert.deepEqual(await p.call('typed', { n: 1 }), [new Json({ ok: true })]);
});

test('the exports speak the WIT as componentize-js maps it', async () => {
  const { tools, toolOutputs } = plugin().exports();
  const listed = tools.listTools();
  assert.deepEqual(listed[0], {
    name: 'text',
    description: 'Returns text.',
    inputSchema: '{"properties":{"n":{"type":"integer"}},"type":"object"}',
    hints: { readOnly: false, destructive: false, idempotent: false, openWorld: false },
  });
  assert.deepEqual(await tools.callTool('value', '{"n":1}'), [
    { tag: 'json', val: '{"list":[1,2],"n":1}' },
  ]);
  // A thrown error carries the WIT `tool-error` as its payload, never a bare exception.
  await assert.rejects(tools.callTool('denied', '{}'), (e) => {
    assert.deepEqual(e.payload, { tag: 'denied', val: 'outside the grant' });
    return true;
  });
  await assert.rejects(tools.callTool('crash', '{}'), (e) => e.payload.tag === 'failed');
  assert.deepEqual(toolOutputs.outputSchemas(), [
    { tool: 'typed', schema: '{"properties":{"ok":{"type":"boolean"}},"type":"object"}' },
  ]);
});

test('declarations are checked when made', () => {
  const p = new Plugin();
  assert.throws(() => p.tool('Bad-Name', { description: 'd' }, () => 1), /invalid/);
  assert.throws(() => p.tool('no_description', {}, () => 1), /description is required/);
  assert.throws(() => p.tool('t', { description: 'd', outputSchema: { type: 'array' } }, () => 1), /"type": "object"/);
  p.tool('t', { description: 'd' }, () => 1);
  assert.throws(() => p.tool('t', { description: 'd' }, () => 1), /twice/);
  assert.equal(canonicalJson({ b: 1, a: { d: [{ z: 1, y: 2 }], c: 0 } }), '{"a":{"c":0,"d":[{"y":2,"z":1}]},"b":1}');
  assert.throws(() => canonicalJson({ n: NaN }), /no JSON form/);
  log.info('a record', { k: 1 });
});

test('a grant the call lacked is told to the host, at most eight a call', () => {
  wanted.length = 0;
  assert.equal(want('fs:/home/ann/docs:ro'), true);
  assert.deepEqual(wanted, ['fs:/home/ann/docs:ro']);
  for (let i = 1; i < 8; i++) assert.equal(want(`env:V${i}`), true);
  assert.equal(want('env:ONE_MORE'), false);
  assert.equal(wanted.length, 8);
});

test('the vendored WIT is the contract', () => {
  const contract = new URL('../../../wit/', import.meta.url);
  if (!existsSync(new URL('../../../host/', import.meta.url))) return; // a copy outside the tree
  const vendored = new URL('../wit/', import.meta.url);
  const names = readdirSync(contract).sort();
  assert.deepEqual(readdirSync(vendored).sort(), names);
  for (const name of names) {
    assert.equal(
      readFileSync(new URL(name, vendored), 'utf8'),
      readFileSync(new URL(name, contract), 'utf8'),
      `sdk/js/wit/${name} differs from wit/${name}: copy it over`,
    );
  }
});
