// The tools under plain Node.js: `npm test` (node --import ./testing/register.js --test).
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

import { Failed, InvalidArguments, Json, NotFound } from '../cordon_sdk.js';
import { plugin } from '../tools.js';

test('text_stats measures a text', async () => {
  const [piece] = await plugin.call('text_stats', { text: 'to be or not to be\nthat is' });
  assert.ok(piece instanceof Json);
  assert.deepEqual(piece.value, { lines: 2, words: 8, characters: 26, most_frequent: 'to' });
});

test('bad input is an error the model can act on', async () => {
  await assert.rejects(plugin.call('text_stats', { text: 'x'.repeat(100_001) }), InvalidArguments);
  await assert.rejects(plugin.call('nope', {}), NotFound);
  await assert.rejects(plugin.call('text_stats', '{not json'), InvalidArguments);
});

test('the component exports never throw anything but a tool error', async () => {
  const { tools } = plugin.exports();
  assert.deepEqual(
    tools.listTools().map((t) => t.name),
    ['text_stats', 'count_text'],
  );
  await assert.rejects(tools.callTool('text_stats', '[]'), (e) => e.payload?.tag === 'invalid-arguments');
  assert.ok(Failed);
});

test('count_text counts the lines with the text in each file', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'count-text-'));
  writeFileSync(join(dir, 'a.txt'), 'needle\nhay\nneedle again\n');
  writeFileSync(join(dir, 'b.txt'), 'only hay\n');
  const [piece] = await plugin.call('count_text', { text: 'needle', paths: [join(dir, 'a.txt'), join(dir, 'b.txt')] });
  assert.deepEqual(piece.value, { [join(dir, 'a.txt')]: 2, [join(dir, 'b.txt')]: 0 });
  await assert.rejects(plugin.call('count_text', { text: 'x', paths: [join(dir, 'none')] }), NotFound);
});
