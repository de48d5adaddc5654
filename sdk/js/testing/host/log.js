// Stand-in for `cordon:tool/log` under plain Node.js: records are kept in `records` (for a
// test to look at) and printed to stderr.
export const records = [];

export function write(level, message, fields) {
  records.push({ level, message, fields });
  process.stderr.write(`[${level}] ${message}${fields.length ? ' ' + JSON.stringify(Object.fromEntries(fields)) : ''}\n`);
}
