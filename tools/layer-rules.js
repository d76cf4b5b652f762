// The import rules of the three layers (docs/architecture.md, "Layers"), as ESLint flat-config blocks: eslint.config.js
// applies them, and test/layers.lint.test.ts shows each crossing fails. Dependencies point down only:
// src → actors → machines.
const SRC = {
  group: ['**/src/**', '!**/node_modules/**'],
  message:
    'actors/ and machines/ never import src/: declare a port in actors/ and implement it in src/ (docs/architecture.md, "Layers").',
};

/**
 * The floors of actors/, bottom first: a folder (or top-level file) imports only from floors below its own, so no
 * two folders import each other, directly or around a circle. A new folder takes the floor above everything it
 * imports; test/layers.lint.test.ts checks the crossings are caught.
 */
export const ACTOR_FLOORS = [
  [
    'admission.ts',
    'async-queue.ts',
    'attention.ts',
    'expression.ts',
    'json-depth.ts',
    'lazy-piscina.ts',
    'pool-load.ts',
    'transferable.ts',
    'upstream',
  ],
  ['audio', 'inference', 'llm', 'render'],
  ['asr', 'faces', 'media', 'mouth', 'vad'],
  ['lipsync', 'tts'],
  ['render-backends', 'stage'],
  ['session-actors.ts'],
];

/**
 * The floors of src/, bottom first, under the same rule as ACTOR_FLOORS: a folder or top-level file imports only
 * floors below its own. Observers of the sessions (inspector, metrics, API schemas, sockets) stand above them and
 * reach the sessions through ports the sessions declare; the routes are the top floor of folders, and the files
 * that assemble and start the service (app.ts, main.ts) stand over them.
 */
export const SRC_FLOORS = [
  [
    'config.ts',
    'domain-errors.ts',
    'errors.ts',
    'files',
    'framework-errors.ts',
    'logger.ts',
    'models.ts',
    'tts',
    'ui',
    'version.ts',
  ],
  ['catalog', 'security', 'store'],
  ['recording', 'voices', 'webhooks'],
  ['streaming'],
  ['sessions'],
  ['inspect', 'metrics', 'schemas', 'ws'],
  ['cluster', 'startup-sweep.ts'],
  ['services.ts'],
  ['health', 'plugins'],
  ['http'],
  ['routes'],
  ['app.ts', 'shutdown.ts'],
  ['main.ts'],
];

const escape = (name) => name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * One ESLint block per folder and top-level file of a floor table: no import of a folder or file on its own floor or
 * above. `extraPatterns(name)` adds the layer's other bans, since a later block replaces an earlier one's patterns.
 */
function floorBlocks(layer, floors, extraPatterns) {
  return floors.flatMap((floor, level) => {
    const notBelow = floors.slice(level).flat();
    return floor.map((name) => {
      const isFile = name.endsWith('.ts');
      const forbidden = notBelow.filter((other) => other !== name).map(escape);
      return {
        files: isFile ? [`${layer}/${name}`] : [`${layer}/${name}/**/*.ts`, `${layer}/${name}/**/*.mjs`],
        rules: {
          '@typescript-eslint/no-restricted-imports': [
            'error',
            {
              patterns: [
                ...extraPatterns(name),
                {
                  // A top-level file reaches its neighbours as ./name, a folder's files climb out with ../.
                  regex: `^${isFile ? '\\./' : '(\\.\\./)+'}(${forbidden.join('|')})(/|$)`,
                  message: `${layer}/${name} imports only folders and files on floors below its own (tools/layer-rules.js, ${layer === 'src' ? 'SRC_FLOORS' : 'ACTOR_FLOORS'}): no circles inside ${layer}/.`,
                },
              ],
            },
          ],
        },
      };
    });
  });
}

/** Routes translate HTTP only: what they need of actors/ and machines/ comes through src/ modules. */
const ROUTES_REACH_DOWN_THROUGH_SRC = {
  group: ['**/actors/**', '**/machines/**'],
  message:
    'routes translate HTTP only: reach actors/ and machines/ through src/sessions (or another src/ module), never directly.',
};

export const LAYER_RULES = [
  {
    // Engines and their actors: nothing from the service above them.
    files: ['actors/**/*.ts', 'actors/**/*.mjs'],
    rules: { '@typescript-eslint/no-restricted-imports': ['error', { patterns: [SRC] }] },
  },
  {
    // Pure machines: values only from xstate; types of the stage interfaces (actors/*/types.ts) are fine.
    files: ['machines/**/*.ts'],
    rules: {
      // Two rules: typescript-eslint lets a type import through every pattern once any pattern allows type imports,
      // so the src/ ban (types included) runs on ESLint's own rule.
      'no-restricted-imports': ['error', { patterns: [SRC] }],
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['**', '!xstate'],
              allowTypeImports: true,
              message:
                'machines/ are pure: value imports come only from xstate (types from actors/*/types.ts are fine).',
            },
          ],
        },
      ],
    },
  },
  ...floorBlocks('actors', ACTOR_FLOORS, () => [SRC]),
  ...floorBlocks('src', SRC_FLOORS, (name) => (name === 'routes' ? [ROUTES_REACH_DOWN_THROUGH_SRC] : [])),
];
