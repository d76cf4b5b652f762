/** A voiced /a/-like sound for mouth tests: 120 Hz with harmonics shaped by a first formant near 700 Hz (and one near 1200). */
export function vowel(ms: number, sampleRate: number, amplitude = 8_000): Int16Array {
  const samples = new Int16Array(Math.round((ms / 1000) * sampleRate));
  for (let i = 0; i < samples.length; i++) {
    let value = 0;
    for (let harmonic = 1; harmonic <= 20; harmonic++) {
      const hz = 120 * harmonic;
      const formantGain = Math.exp(-(((hz - 700) / 250) ** 2)) + 0.3 * Math.exp(-(((hz - 1200) / 300) ** 2));
      value += formantGain * Math.sin((2 * Math.PI * hz * i) / sampleRate);
    }
    samples[i] = Math.round(amplitude * value);
  }
  return samples;
}
