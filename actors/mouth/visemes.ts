/**
 * ARPAbet phone → viseme → mouth pose. The viseme classes are the usual 15 (silence, PP, FF, TH, DD,
 * kk, CH, SS, nn, RR, aa, E, I, O, U); poses are hand-tuned so vowels open the jaw, i/e spread the
 * lips, o/u/w round them and m/b/p close them completely.
 */
import type { MouthPose } from '../render/types.ts';

/**
 * One phone (or word) with its time span, relative to the start of the TTS chunk it came with: what the mouth
 * timeline is built from (`timeline.ts`), declared here so that `tts/` depends on the mouth and not the reverse.
 */
export interface PhoneTiming {
  /** ARPAbet-like phone symbol in lower case (`aa`, `m`, `pau`, ...). */
  phone: string;
  startMs: number;
  endMs: number;
}

export type Viseme =
  | 'sil'
  | 'PP'
  | 'FF'
  | 'TH'
  | 'DD'
  | 'kk'
  | 'CH'
  | 'SS'
  | 'nn'
  | 'RR'
  | 'aa'
  | 'E'
  | 'I'
  | 'O'
  | 'U'
  | 'ax';

const PHONE_TO_VISEME: Readonly<Record<string, Viseme>> = {
  pau: 'sil',
  sil: 'sil',
  sp: 'sil',
  'h#': 'sil',
  m: 'PP',
  b: 'PP',
  p: 'PP',
  em: 'PP',
  f: 'FF',
  v: 'FF',
  th: 'TH',
  dh: 'TH',
  t: 'DD',
  d: 'DD',
  dx: 'DD',
  l: 'DD',
  el: 'DD',
  k: 'kk',
  g: 'kk',
  hh: 'kk',
  q: 'kk',
  ch: 'CH',
  jh: 'CH',
  sh: 'CH',
  zh: 'CH',
  s: 'SS',
  z: 'SS',
  n: 'nn',
  ng: 'nn',
  en: 'nn',
  nx: 'nn',
  r: 'RR',
  er: 'RR',
  axr: 'RR',
  aa: 'aa',
  ae: 'aa',
  ah: 'aa',
  ay: 'aa',
  aw: 'aa',
  eh: 'E',
  ey: 'E',
  iy: 'I',
  ih: 'I',
  y: 'I',
  ix: 'I',
  ao: 'O',
  ow: 'O',
  oy: 'O',
  uw: 'U',
  uh: 'U',
  w: 'U',
  ux: 'U',
  ax: 'ax',
};

export const VISEME_POSES: Readonly<Record<Viseme, MouthPose>> = {
  sil: { open: 0, wide: 0, round: 0 },
  PP: { open: 0, wide: 0.1, round: 0 },
  FF: { open: 0.08, wide: 0.25, round: 0 },
  TH: { open: 0.2, wide: 0.3, round: 0 },
  DD: { open: 0.25, wide: 0.3, round: 0 },
  kk: { open: 0.3, wide: 0.2, round: 0 },
  CH: { open: 0.2, wide: 0.05, round: 0.55 },
  SS: { open: 0.12, wide: 0.55, round: 0 },
  nn: { open: 0.2, wide: 0.25, round: 0 },
  RR: { open: 0.25, wide: 0.05, round: 0.5 },
  aa: { open: 1, wide: 0.3, round: 0 },
  E: { open: 0.55, wide: 0.6, round: 0 },
  I: { open: 0.3, wide: 0.85, round: 0 },
  O: { open: 0.6, wide: 0, round: 0.75 },
  U: { open: 0.25, wide: 0, round: 0.95 },
  ax: { open: 0.4, wide: 0.2, round: 0 },
};

/**
 * How strongly a viseme holds its shape against its neighbours when blended: lips must really close
 * for m/b/p and touch the teeth for f/v, while vowels and pauses give way to what surrounds them.
 */
export const VISEME_DOMINANCE: Readonly<Record<Viseme, number>> = {
  sil: 0.8,
  PP: 6,
  FF: 4,
  TH: 1.5,
  DD: 1,
  kk: 0.8,
  CH: 2,
  SS: 1.5,
  nn: 1,
  RR: 1.2,
  aa: 1.2,
  E: 1.2,
  I: 1.2,
  O: 1.5,
  U: 1.8,
  ax: 0.8,
};

/** Unknown phones get a neutral half-open shape rather than snapping shut. */
const UNKNOWN_PHONE_VISEME: Viseme = 'ax';

export function visemeForPhone(phone: string): Viseme {
  const key = phone.trim().toLowerCase().replace(/[0-9]/gu, '');
  return PHONE_TO_VISEME[key] ?? UNKNOWN_PHONE_VISEME;
}

export function poseForPhone(phone: string): MouthPose {
  return VISEME_POSES[visemeForPhone(phone)];
}
