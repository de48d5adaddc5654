// Stand-in for `cordon:tool/bulk-read` under plain Node.js: reads the queued files with
// node:fs, one after another (the host reads them ahead on its own threads, inside grants).
import { readFileSync, statSync } from 'node:fs';

function read(path, maxSize) {
  try {
    const stat = statSync(path);
    if (!stat.isFile()) return { tag: 'err', val: { tag: 'not-a-file' } };
    if (BigInt(stat.size) > maxSize) return { tag: 'err', val: { tag: 'too-large', val: BigInt(stat.size) } };
    return { tag: 'ok', val: new Uint8Array(readFileSync(path)) };
  } catch (e) {
    return { tag: 'err', val: e.code === 'ENOENT' ? { tag: 'not-found' } : { tag: 'other', val: e.message } };
  }
}

export class Reader {
  #maxSize;
  #queue = [];
  #needles = null;

  constructor(maxSize) {
    this.#maxSize = maxSize;
  }

  static sifting(maxSize, needles, lengths) {
    const reader = new Reader(maxSize);
    let at = 0;
    reader.#needles = [...lengths].map((n) => needles.slice(at, (at += n)));
    return reader;
  }

  add(path) {
    this.#queue.push(path);
  }

  queued() {
    return this.#queue.length;
  }

  take(max) {
    return this.#queue.splice(0, max).map((path) => ({ path, contents: read(path, this.#maxSize) }));
  }

  takeSifted(max) {
    return this.take(max).map(({ path, contents }) => {
      if (contents.tag === 'err') return { path, contents };
      const bytes = contents.val;
      const has = (needle) => Buffer.from(bytes).includes(Buffer.from(needle));
      if (!this.#needles || this.#needles.length === 0 || this.#needles.some(has)) {
        return { path, contents: { tag: 'ok', val: { tag: 'whole', val: bytes } } };
      }
      const nul = bytes.indexOf(0);
      return {
        path,
        contents: {
          tag: 'ok',
          val: { tag: 'passed-over', val: { size: BigInt(bytes.length), firstNul: nul < 0 ? undefined : BigInt(nul) } },
        },
      };
    });
  }
}
