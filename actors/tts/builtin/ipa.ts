/**
 * eSpeak reports phonemes in IPA; the mouth track speaks ARPAbet. This maps IPA (any language) onto
 * the nearest ARPAbet phone by mouth shape, which is all the mapping is used for.
 */

/** Longest IPA sequences first, so "aɪ" wins over "a" and "tʃ" over "t". */
const IPA_TO_ARPABET: ReadonlyArray<readonly [string, string]> = [
  ['aɪ', 'ay'],
  ['ɑɪ', 'ay'],
  ['aʊ', 'aw'],
  ['ɑu', 'aw'],
  ['au', 'aw'],
  ['ɔɪ', 'oy'],
  ['oɪ', 'oy'],
  ['əʊ', 'ow'],
  ['oʊ', 'ow'],
  ['ou', 'ow'],
  ['eɪ', 'ey'],
  ['ei', 'ey'],
  ['eə', 'eh'],
  ['ɪə', 'ih'],
  ['ʊə', 'uh'],
  ['iɛ', 'iy'],
  ['tʃ', 'ch'],
  ['tɕ', 'ch'],
  ['ʈʂ', 'ch'],
  ['dʒ', 'jh'],
  ['dʑ', 'jh'],
  ['ɖʐ', 'jh'],
  ['ts', 't'],
  ['dz', 'd'],
  ['pf', 'f'],
  ['ɑ', 'aa'],
  ['a', 'aa'],
  ['ä', 'aa'],
  ['ɐ', 'ah'],
  ['æ', 'ae'],
  ['ʌ', 'ah'],
  ['ə', 'ax'],
  ['ɜ', 'er'],
  ['ɚ', 'er'],
  ['ɝ', 'er'],
  ['ɘ', 'ax'],
  ['ɵ', 'ax'],
  ['ɛ', 'eh'],
  ['e', 'ey'],
  ['œ', 'eh'],
  ['ø', 'uh'],
  ['ɪ', 'ih'],
  ['i', 'iy'],
  ['ɨ', 'ih'],
  ['y', 'uw'],
  ['ʏ', 'uh'],
  ['ɒ', 'ao'],
  ['ɔ', 'ao'],
  ['o', 'ow'],
  ['ʊ', 'uh'],
  ['u', 'uw'],
  ['ɯ', 'uw'],
  ['ʉ', 'uw'],
  ['ɤ', 'ah'],
  ['p', 'p'],
  ['b', 'b'],
  ['β', 'b'],
  ['t', 't'],
  ['ʈ', 't'],
  ['d', 'd'],
  ['ɖ', 'd'],
  ['k', 'k'],
  ['c', 'k'],
  ['q', 'k'],
  ['ɡ', 'g'],
  ['g', 'g'],
  ['ɣ', 'g'],
  ['ʔ', 't'],
  ['m', 'm'],
  ['ɱ', 'm'],
  ['n', 'n'],
  ['ɲ', 'n'],
  ['ɳ', 'n'],
  ['ŋ', 'ng'],
  ['ɴ', 'ng'],
  ['f', 'f'],
  ['ɸ', 'f'],
  ['v', 'v'],
  ['ʋ', 'v'],
  ['θ', 'th'],
  ['ð', 'dh'],
  ['s', 's'],
  ['z', 'z'],
  ['ʃ', 'sh'],
  ['ʒ', 'zh'],
  ['ɕ', 'sh'],
  ['ʑ', 'zh'],
  ['ʂ', 'sh'],
  ['ʐ', 'zh'],
  ['ç', 'hh'],
  ['x', 'hh'],
  ['χ', 'hh'],
  ['h', 'hh'],
  ['ɦ', 'hh'],
  ['ħ', 'hh'],
  ['l', 'l'],
  ['ɫ', 'l'],
  ['ʎ', 'l'],
  ['ɭ', 'l'],
  ['ɬ', 'l'],
  ['r', 'r'],
  ['ɾ', 'r'],
  ['ɹ', 'r'],
  ['ʁ', 'r'],
  ['ʀ', 'r'],
  ['ɻ', 'r'],
  ['j', 'y'],
  ['ʝ', 'y'],
  ['w', 'w'],
  ['ɥ', 'w'],
  ['ʍ', 'w'],
];

/** Stress, length, tone, syllable and nasal/other diacritic marks carry no mouth-shape information. */
// eslint-disable-next-line no-misleading-character-class -- combining marks are listed on purpose, to be stripped one by one
const IGNORED_MARKS = /[ˈˌːˑ.\-_'0-9\u0300-\u036f\u02b0-\u02ff\u1dc4-\u1dc9]/gu;

/**
 * Maps one eSpeak IPA phoneme name to an ARPAbet phone. An empty name is eSpeak's pause (`pau`);
 * a name made only of modifier marks (a palatalisation, a tone) returns null: it continues the
 * previous phone rather than being a phone of its own.
 */
export function ipaToArpabet(ipa: string): string | null {
  if (ipa.trim().length === 0) return 'pau';
  const cleaned = ipa.normalize('NFD').replace(IGNORED_MARKS, '').normalize('NFC');
  if (cleaned.length === 0) return null;
  for (const [pattern, phone] of IPA_TO_ARPABET) {
    if (cleaned.startsWith(pattern)) return phone;
  }
  // NFD splits "ä" into "a" + diaeresis; try the decomposed base letter too.
  const base = cleaned.normalize('NFD').replace(/[\u0300-\u036f]/gu, '');
  for (const [pattern, phone] of IPA_TO_ARPABET) {
    if (base.startsWith(pattern)) return phone;
  }
  return 'pau';
}
