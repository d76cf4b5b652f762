/**
 * How deeply a JSON value from outside may nest before anything walks it: tool parameter schemas and tool outputs
 * from clients, tool-call arguments from the model. Such values nest a handful of levels. JSON.parse is iterative, but
 * JSON.stringify (SSE events, requests to the model, the transcript's LevelDB encoding) recurses once per level and
 * throws RangeError a few thousand levels down; 64 is far above any real schema or result and far below that.
 */
export const MAX_JSON_DEPTH = 64;

/**
 * Whether `value` nests deeper than `maxDepth` (a scalar has depth 0, `{}` and `[]` depth 1). Iterative (a stack of
 * the containers still to open), so depth itself cannot exhaust the call stack, and it stops at the first container
 * past the bound: the cost is at most the number of values looked at, bounded by the body or text they came from.
 */
export function nestsDeeperThan(value: unknown, maxDepth = MAX_JSON_DEPTH): boolean {
  const pending: Array<{ container: object; depth: number }> = [];
  if (value !== null && typeof value === 'object') pending.push({ container: value, depth: 1 });
  while (pending.length > 0) {
    const { container, depth } = pending.pop()!;
    if (depth > maxDepth) return true;
    for (const child of Array.isArray(container) ? container : Object.values(container)) {
      if (child !== null && typeof child === 'object') pending.push({ container: child as object, depth: depth + 1 });
    }
  }
  return false;
}
