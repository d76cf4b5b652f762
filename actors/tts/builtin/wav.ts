/** Minimal RIFF/WAVE reader for the 16-bit mono PCM files flite writes. */
import { pcm16FromLittleEndian } from '../../audio/wav.ts';

export function decodeWavPcm16(bytes: Buffer): { pcm: Int16Array; sampleRate: number } {
  if (bytes.toString('ascii', 0, 4) !== 'RIFF' || bytes.toString('ascii', 8, 12) !== 'WAVE') {
    throw new Error('not a RIFF/WAVE file');
  }
  let offset = 12;
  let sampleRate = 0;
  let channels = 0;
  while (offset + 8 <= bytes.length) {
    const chunkId = bytes.toString('ascii', offset, offset + 4);
    const chunkSize = bytes.readUInt32LE(offset + 4);
    const body = offset + 8;
    if (chunkId === 'fmt ') {
      const format = bytes.readUInt16LE(body);
      channels = bytes.readUInt16LE(body + 2);
      sampleRate = bytes.readUInt32LE(body + 4);
      const bitsPerSample = bytes.readUInt16LE(body + 14);
      if (format !== 1 || bitsPerSample !== 16 || channels !== 1) {
        throw new Error(`unsupported WAV format ${format}/${bitsPerSample} bit/${channels} ch`);
      }
    } else if (chunkId === 'data') {
      if (!sampleRate) throw new Error('WAV data chunk before fmt chunk');
      // Flite may leave a too-large size when it streams; never read past the file.
      const byteLength = Math.min(chunkSize, bytes.length - body) & ~1;
      return { pcm: pcm16FromLittleEndian(bytes.subarray(body, body + byteLength)), sampleRate };
    }
    offset = body + chunkSize + (chunkSize & 1);
  }
  throw new Error('WAV file has no data chunk');
}
