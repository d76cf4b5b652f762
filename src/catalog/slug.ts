/**
 * The avatar id rule of spec 2.1: letters, digits, hyphen, underscore and CJK characters. Anything else
 * (dots, slashes, percent escapes, NUL) is rejected, so an id can never name a path outside the avatars
 * directory.
 */
const AVATAR_ID = /^[A-Za-z0-9_\-\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}]{1,128}$/u;

export function isValidAvatarId(id: string): boolean {
  return AVATAR_ID.test(id);
}

/** The JSON-schema pattern of the same rule (for OpenAPI), without Unicode property escapes. */
export const AVATAR_ID_PATTERN =
  '^[A-Za-z0-9_\\-\\u3040-\\u30ff\\u3400-\\u4dbf\\u4e00-\\u9fff\\uf900-\\ufaff\\uac00-\\ud7af]{1,128}$';
