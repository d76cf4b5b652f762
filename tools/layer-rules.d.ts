// Types of tools/layer-rules.js for TypeScript readers of its floor tables (tools/import-graph.ts).
export const ACTOR_FLOORS: string[][];
export const SRC_FLOORS: string[][];
export const LAYER_RULES: object[];
