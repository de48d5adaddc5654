// Stand-in for `cordon:tool/grant-wanted` under plain Node.js: the grants a call said it
// lacked are kept in `wanted` (for a test to look at), at most 8, as the host notes them.
export const wanted = [];

export function want(grant) {
  if (wanted.length >= 8) {
    throw new Error('this call already said it lacked 8 grants; no more are noted');
  }
  wanted.push(grant);
}
