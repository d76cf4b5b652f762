import { Type } from '@sinclair/typebox';

/** A browser's receive-only offer (audio Opus, video VP8), as `RTCPeerConnection.createOffer()` makes it; trimmed to one codec each. */
export const EXAMPLE_OFFER_SDP = [
  'v=0',
  'o=- 1679148735965140527 2 IN IP4 127.0.0.1',
  's=-',
  't=0 0',
  'a=group:BUNDLE 0 1',
  'a=msid-semantic: WMS',
  'm=audio 9 UDP/TLS/RTP/SAVPF 111',
  'c=IN IP4 0.0.0.0',
  'a=rtcp:9 IN IP4 0.0.0.0',
  'a=ice-ufrag:Nf8y',
  'a=ice-pwd:Jk38WoO53/a/jRRw88c0NenT',
  'a=ice-options:trickle',
  'a=fingerprint:sha-256 A8:1D:E7:00:83:A1:94:DB:77:E7:B0:6F:28:D3:0A:1C:1F:20:56:C8:7F:22:86:CC:6F:1E:85:C9:82:E2:1C:F9',
  'a=setup:actpass',
  'a=mid:0',
  'a=recvonly',
  'a=rtcp-mux',
  'a=rtpmap:111 opus/48000/2',
  'a=fmtp:111 minptime=10;useinbandfec=1',
  'm=video 9 UDP/TLS/RTP/SAVPF 96',
  'c=IN IP4 0.0.0.0',
  'a=rtcp:9 IN IP4 0.0.0.0',
  'a=ice-ufrag:Nf8y',
  'a=ice-pwd:Jk38WoO53/a/jRRw88c0NenT',
  'a=ice-options:trickle',
  'a=fingerprint:sha-256 A8:1D:E7:00:83:A1:94:DB:77:E7:B0:6F:28:D3:0A:1C:1F:20:56:C8:7F:22:86:CC:6F:1E:85:C9:82:E2:1C:F9',
  'a=setup:actpass',
  'a=mid:1',
  'a=recvonly',
  'a=rtcp-mux',
  'a=rtcp-rsize',
  'a=rtpmap:96 VP8/90000',
  '',
].join('\r\n');

/** The body of `POST /sessions/{id}/webrtc/offer`. */
export const SdpOffer = Type.Object(
  {
    sdp: Type.String({ minLength: 1, maxLength: 65536, description: 'SDP offer' }),
    type: Type.Literal('offer'),
  },
  { $id: 'SdpOffer', examples: [{ type: 'offer', sdp: EXAMPLE_OFFER_SDP }] },
);
export const SdpAnswer = Type.Object({ sdp: Type.String(), type: Type.Literal('answer') }, { $id: 'SdpAnswer' });
