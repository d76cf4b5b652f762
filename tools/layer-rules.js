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

const escape = (name) => name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** One block per actors/ folder: the src/ ban, and no import of a folder on its own floor or above. */
function actorFloorBlocks() {
  return ACTOR_FLOORS.flatMap((floor, level) => {
    const notBelow = ACTOR_FLOORS.slice(level).flat();
    return floor
      .filter((name) => !name.endsWith('.ts'))
      .map((folder) => {
        const forbidden = notBelow.filter((other) => other !== folder).map(escape);
        return {
          files: [`actors/${folder}/**/*.ts`, `actors/${folder}/**/*.mjs`],
          rules: {
            '@typescript-eslint/no-restricted-imports': [
              'error',
              {
                patterns: [
                  SRC,
                  {
                    regex: `^(\\.\\./)+(${forbidden.join('|')})(/|$)`,
                    message: `actors/${folder}/ imports only folders on floors below its own (tools/layer-rules.js, ACTOR_FLOORS): no circles between actors/ folders.`,
                  },
                ],
              },
            ],
          },
        };
      });
  });
}

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
  {
    // Routes translate HTTP to the domain: they reach engines and machines only through src/ modules.
    files: ['src/routes/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['**/actors/**', '**/machines/**'],
              message:
                'routes translate HTTP only: reach actors/ and machines/ through src/sessions (or another src/ module), never directly.',
            },
          ],
        },
      ],
    },
  },
  ...actorFloorBlocks(),
];
