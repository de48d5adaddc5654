// The plugin's tools. `app.js` exports them to the component; tests import this module
// directly under plain Node.js.
import { Plugin, InvalidArguments, Denied, NotFound, bulkRead, log } from './cordon_sdk.js';

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

plugin.tool(
  'count_text',
  {
    description:
      'Counts the lines containing a text in each of the given files (paths inside the ' +
      'directories this plugin was granted). Files without the text are reported as 0.',
    inputSchema: {
      type: 'object',
      properties: {
        text: { type: 'string', minLength: 1, maxLength: 1024, description: 'The text to look for.' },
        paths: { type: 'array', items: { type: 'string' }, maxItems: 1000, description: 'The files.' },
      },
      required: ['text', 'paths'],
      additionalProperties: false,
    },
    hints: { readOnly: true, idempotent: true },
  },
  ({ text, paths }) => {
    // The host reads the files ahead on its own threads and, looking for `text` itself,
    // hands over only the files that contain it.
    const reader = bulkRead.sifting(8 << 20, [text]);
    for (const path of paths) reader.add(path);
    const counts = {};
    const decoder = new TextDecoder();
    while (reader.queued() > 0) {
      for (const { path, contents } of reader.takeSifted(64)) {
        if (contents.tag === 'err') {
          const why = contents.val.tag;
          if (why === 'not-found') throw new NotFound(`${path} does not exist`);
          if (why === 'not-granted') throw new Denied(`${path} is outside the granted directories`);
          throw new InvalidArguments(`${path} cannot be read (${why}${contents.val.val ? ': ' + contents.val.val : ''})`);
        }
        const sifted = contents.val;
        counts[path] =
          sifted.tag === 'whole' ? decoder.decode(sifted.val).split('\n').filter((l) => l.includes(text)).length : 0;
      }
    }
    return counts;
  },
);
