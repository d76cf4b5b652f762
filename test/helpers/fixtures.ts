import { fileURLToPath } from 'node:url';

/** The NASA astronaut portrait (public domain), kept in the repository so tests run on any machine. */
export const PORTRAIT_FIXTURE = fileURLToPath(new URL('../fixtures/portrait-astronaut.png', import.meta.url));
