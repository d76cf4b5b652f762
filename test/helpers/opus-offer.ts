/** A minimal offer with an Opus payload type (its fmtp parameters `fmtp`, or no fmtp line) and a video section. */
export function opusOffer(fmtp: string | null): string {
  return [
    'v=0',
    'o=- 1 2 IN IP4 127.0.0.1',
    's=-',
    't=0 0',
    'm=audio 9 UDP/TLS/RTP/SAVPF 111 0',
    'a=rtpmap:111 opus/48000/2',
    ...(fmtp === null ? [] : [`a=fmtp:111 ${fmtp}`]),
    'a=rtpmap:0 PCMU/8000',
    'm=video 9 UDP/TLS/RTP/SAVPF 96',
    'a=rtpmap:96 VP8/90000',
    'a=fmtp:96 max-fs=12288',
    '',
  ].join('\r\n');
}
