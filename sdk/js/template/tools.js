// The plugin's tools. `app.js` exports them to the component; tests import this module
// directly under plain Node.js.
import { Plugin, InvalidArguments, log } from './cordon_sdk.js';

export const plugin = new Plugin();

plugin.tool(
  'text_stats',
  {
    description:
      'Counts the lines, words and characters of a text, and its most frequent word. Use it ' +
      'instead of counting by hand.',
    inputSchema: {
      type: 'object',
      properties: { text: { type: 'string', description: 'The text to measure.' } },
      required: ['text'],
      additionalProperties: false,
    },
    outputSchema: {
      type: 'object',
      properties: {
        lines: { type: 'integer' },
        words: { type: 'integer' },
        characters: { type: 'integer' },
        most_frequent: { type: ['string', 'null'] },
      },
      required: ['lines', 'words', 'characters', 'most_frequent'],
    },
    hints: { readOnly: true, idempotent: true },
  },
  ({ text }) => {
    if (text.length > 100_000) {
      throw new InvalidArguments('the text is longer than 100,000 characters; pass a part of it');
    }
    // Word characters are anything but white space and punctuation (the component's
    // JavaScript engine has no Unicode property escapes such as \p{L}).
    const words = text.toLowerCase().match(/[^\s.,;:!?"()[\]{}<>\/\\|*&^%$#@~`+=-]+/g) ?? [];
    const counts = new Map();
    for (const w of words) counts.set(w, (counts.get(w) ?? 0) + 1);
    let best = null;
    for (const [w, n] of counts) if (best === null || n > counts.get(best)) best = w;
    log.debug('measured a text', { words: words.length });
    return {
      lines: text === '' ? 0 : text.split('\n').length,
      words: words.length,
      characters: [...text].length,
      most_frequent: best,
    };
  },
);
