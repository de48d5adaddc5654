// Write a Cordon tool plugin in JavaScript.
//
// A Cordon plugin is a WebAssembly component of the `cordon:tool` WIT world `plugin` (or
// `plugin-with-outputs`): it exports `list-tools` and `call-tool` and may import `log` and
// `bulk-read`. componentize-js turns an ES module into such a component; this module does the
// chores every plugin would repeat: tool names checked, schemas serialised deterministically
// (the host hashes the tool list at install), results turned into content pieces, and every
// error, thrown on purpose or not, turned into a WIT `tool-error` the model can act on, so
// that nothing thrown ever reaches the component boundary (where it would trap the plugin).
//
//     import { Plugin, NotFound } from './cordon_sdk.js';
//
//     const plugin = new Plugin();
//     plugin.tool('greet', {
//       description: 'Greets someone by name.',
//       inputSchema: { type: 'object', properties: { name: { type: 'string' } },
//                      required: ['name'], additionalProperties: false },
//       hints: { readOnly: true, idempotent: true },
//     }, ({ name }) => `Hello, ${name}!`);
//
//     export const { tools, toolOutputs } = plugin.exports();
//
// The host checks the arguments against the input schema before `call-tool`. Under plain
// Node.js (tests) `cordon:tool/…` imports resolve to `testing/host.js` when Node runs with
// `--import ./testing/register.js`.

import { write as hostLog } from 'cordon:tool/log@0.1.5';
import { Reader } from 'cordon:tool/bulk-read@0.1.5';
import { want as hostWant } from 'cordon:tool/grant-wanted@0.1.5';

/** A failure the model should act on; `kind` is one of the WIT `tool-error` cases. */
export class ToolError extends Error {
  constructor(kind, message) {
    super(message);
    this.kind = kind;
  }
}

/** The arguments did not fit the tool (wrong type, missing field, bad value). */
export class InvalidArguments extends ToolError {
  constructor(message) {
    super('invalid-arguments', message);
  }
}

/** Something named in the arguments does not exist (a file, a table, a record). */
export class NotFound extends ToolError {
  constructor(message) {
    super('not-found', message);
  }
}

/** The plugin was not allowed to do it (outside a grant, read-only, policy). */
export class Denied extends ToolError {
  constructor(message) {
    super('denied', message);
  }
}

/** Anything else that went wrong while running the tool. */
export class Failed extends ToolError {
  constructor(message) {
    super('failed', message);
  }
}

/** A result piece of plain text (a returned string is one too). */
export class Text {
  constructor(text) {
    this.text = String(text);
  }
}

/** A structured result piece: any JSON value (a returned object, array, number or boolean is one too). */
export class Json {
  constructor(value) {
    this.value = value;
  }
}

const TOOL_NAME = /^[a-z][a-z0-9_]*$/;
const MAX_TOOL_NAME = 64;

/** JSON text with object keys sorted at every level: the same schema always hashes the same. */
export function canonicalJson(value) {
  const sorted = (v) => {
    if (Array.isArray(v)) return v.map(sorted);
    if (v && typeof v === 'object') {
      return Object.fromEntries(
        Object.keys(v)
          .sort()
          .map((k) => [k, sorted(v[k])]),
      );
    }
    if (typeof v === 'number' && !Number.isFinite(v)) {
      throw new TypeError(`${v} has no JSON form`);
    }
    return v;
  };
  return JSON.stringify(sorted(value));
}

function textOf(error) {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  try {
    return String(error);
  } catch {
    return 'an unprintable value';
  }
}

/** Writes to the host's log (never to the model); fields are key/value strings. */
export const log = Object.fromEntries(
  ['trace', 'debug', 'info', 'warn', 'error'].map((level) => [
    level,
    (message, fields = {}) => {
      try {
        hostLog(
          level,
          String(message),
          Object.entries(fields).map(([k, v]) => [String(k), String(v)]),
        );
      } catch {
        // Logging never fails a tool.
      }
    },
  ]),
);

/**
 * The host's bulk reader (`cordon:tool/bulk-read`): queue paths inside granted directories
 * with `add(path)`, then `take(max)` them, read ahead on the host's threads. `sifting(maxSize,
 * needles)` hands over only the files containing one of the needles (strings).
 */
export const bulkRead = {
  reader(maxSize) {
    return new Reader(BigInt(maxSize));
  },
  sifting(maxSize, needles) {
    const encoded = needles.map((n) => new TextEncoder().encode(n));
    const bytes = new Uint8Array(encoded.reduce((n, e) => n + e.length, 0));
    let at = 0;
    for (const e of encoded) {
      bytes.set(e, at);
      at += e.length;
    }
    return Reader.sifting(BigInt(maxSize), bytes, new Uint32Array(encoded.map((e) => e.length)));
  },
};

/**
 * Tells the host this call lacked `grant` (`cordon:tool/grant-wanted`, WIT 0.1.5), in grant
 * syntax: the narrowest one, such as `fs:/home/ann/docs:ro` for a file read there. Then fail
 * the call as it would have failed anyway (throw a `Denied`): a person may be asked for the
 * grant, and the call runs again with it. Saying so grants nothing. Returns whether the host
 * noted it (it refuses marks, relative paths and more than 8 a call).
 */
export function want(grant) {
  try {
    hostWant(String(grant));
    return true;
  } catch {
    return false;
  }
}

/** A plugin's tools, and the exports componentize-js needs. */
export class Plugin {
  #tools = new Map();

  /**
   * Declares a tool. `spec`: `description` (for the model), `inputSchema` (a JSON Schema
   * object; default: no arguments), `outputSchema` (for a tool whose every result is one JSON
   * object; checked to be `type: object`), `hints` (`readOnly`, `destructive`, `idempotent`,
   * `openWorld`: the author's claims, shown, never trusted). `run(args)` returns the result
   * (see `Plugin.call`) or a promise of it, or throws.
   */
  tool(name, spec, run) {
    if (typeof name !== 'string' || !TOOL_NAME.test(name) || name.length > MAX_TOOL_NAME) {
      throw new TypeError(
        `tool name ${JSON.stringify(name)} is invalid: use lowercase letters, digits and _, ` +
          `starting with a letter, at most ${MAX_TOOL_NAME} characters`,
      );
    }
    if (this.#tools.has(name)) throw new TypeError(`tool ${name} is declared twice`);
    if (typeof run !== 'function') throw new TypeError(`tool ${name}: run must be a function`);
    const { description, inputSchema = { type: 'object', properties: {} }, outputSchema, hints = {} } =
      spec ?? {};
    if (typeof description !== 'string' || !description.trim()) {
      throw new TypeError(`tool ${name}: a description is required (the model reads it)`);
    }
    if (!inputSchema || typeof inputSchema !== 'object' || Array.isArray(inputSchema)) {
      throw new TypeError(`tool ${name}: inputSchema must be a JSON Schema object`);
    }
    if (outputSchema !== undefined && outputSchema?.type !== 'object') {
      throw new TypeError(`tool ${name}: outputSchema must have "type": "object" (one JSON object per result)`);
    }
    this.#tools.set(name, {
      description,
      inputSchema: canonicalJson(inputSchema),
      outputSchema: outputSchema === undefined ? undefined : canonicalJson(outputSchema),
      hints: {
        readOnly: Boolean(hints.readOnly),
        destructive: Boolean(hints.destructive),
        idempotent: Boolean(hints.idempotent),
        openWorld: Boolean(hints.openWorld),
      },
      run,
    });
    return this;
  }

  /** The declared tools, as `list-tools` gives them. */
  descriptors() {
    return [...this.#tools].map(([name, t]) => ({
      name,
      description: t.description,
      inputSchema: t.inputSchema,
      hints: { ...t.hints },
    }));
  }

  /**
   * Runs tool `name` with `args` (a JSON object as text, or an object) and returns its result
   * as content pieces (`Text`/`Json`): `undefined`/`null` is none, a string one `Text`, a
   * `Text`/`Json` or an array of them as given, any other value one `Json`. Every failure is
   * thrown as a `ToolError`: an error the tool did not throw on purpose becomes `Failed`,
   * with its stack sent to the host log rather than to the model.
   */
  async call(name, args) {
    const tool = this.#tools.get(name);
    if (!tool) {
      const offered = [...this.#tools.keys()].join(', ') || '(none)';
      throw new NotFound(`this plugin has no tool named ${JSON.stringify(name)}; it offers: ${offered}`);
    }
    let parsed = args;
    if (typeof args === 'string') {
      try {
        parsed = JSON.parse(args);
      } catch (e) {
        throw new InvalidArguments(`the arguments are not valid JSON (${e.message}); pass a JSON object`);
      }
    }
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) {
      throw new InvalidArguments('the arguments must be a JSON object');
    }
    let value;
    try {
      value = await tool.run(parsed);
    } catch (e) {
      if (e instanceof ToolError) throw e;
      log.error(`tool ${name} threw`, { error: textOf(e), stack: e?.stack ?? '' });
      throw new Failed(`tool ${name} failed: ${textOf(e)}`);
    }
    const pieces = toContent(name, value);
    if (tool.outputSchema !== undefined) {
      const json = pieces.filter((p) => p instanceof Json);
      if (json.length !== 1 || !json[0].value || typeof json[0].value !== 'object' || Array.isArray(json[0].value)) {
        throw new Failed(
          `tool ${name} declares an output schema but did not return exactly one JSON object; this is a bug in the tool`,
        );
      }
    }
    return pieces;
  }

  /**
   * The component's exports: `tools` (`cordon:tool/tools`) and `toolOutputs`
   * (`cordon:tool/tool-outputs`, for the world `plugin-with-outputs`). End the app module
   * with `export const { tools, toolOutputs } = plugin.exports();` (or only `tools` for the
   * world `plugin`).
   */
  exports() {
    const plugin = this;
    return {
      tools: {
        listTools: () => plugin.descriptors(),
        async callTool(name, args) {
          try {
            const pieces = await plugin.call(name, args);
            return pieces.map((p) =>
              p instanceof Text ? { tag: 'text', val: p.text } : { tag: 'json', val: canonicalJson(p.value) },
            );
          } catch (e) {
            const error = e instanceof ToolError ? e : new Failed(`tool ${name} failed: ${textOf(e)}`);
            // componentize-js returns a thrown error's `payload` as the `result`'s error.
            const thrown = new Error(error.message);
            thrown.payload = { tag: error.kind, val: error.message };
            throw thrown;
          }
        },
      },
      toolOutputs: {
        outputSchemas: () =>
          [...plugin.#tools]
            .filter(([, t]) => t.outputSchema !== undefined)
            .map(([tool, t]) => ({ tool, schema: t.outputSchema })),
      },
    };
  }
}

function toContent(name, value) {
  if (value === undefined || value === null) return [];
  if (typeof value === 'string') return [new Text(value)];
  if (value instanceof Text || value instanceof Json) return [check(name, value)];
  if (Array.isArray(value) && value.length && value.every((v) => v instanceof Text || v instanceof Json)) {
    return value.map((v) => check(name, v));
  }
  if (Array.isArray(value) && value.some((v) => v instanceof Text || v instanceof Json)) {
    throw new Failed(
      `tool ${name} returned a list mixing Text/Json pieces with plain values; this is a bug in the tool`,
    );
  }
  return [check(name, new Json(value))];
}

function check(name, piece) {
  if (piece instanceof Json) {
    try {
      if (canonicalJson(piece.value) === undefined) throw new TypeError('it is not a JSON value');
    } catch (e) {
      throw new Failed(`tool ${name} returned a value that is not JSON (${e.message}); this is a bug in the tool`);
    }
  }
  return piece;
}
