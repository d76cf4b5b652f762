/**
 * Puts I420 frames on a canvas with WebGL: the three planes as luminance textures and BT.601 (limited range, nearest
 * chroma) in a fragment shader, the same arithmetic as the server's `i420ToRgba`. Measured in headless Chromium
 * (`npm run bench -- render_kit`, docs/performance.md): ~0.3 ms a 512² frame, against 6–13 ms for the 2D canvas's
 * conversion in JavaScript and `putImageData`; the face canvas falls back to 2D where WebGL is not available.
 */
import type { I420Frame } from '../actors/render/types.ts';

const VERTEX = `attribute vec2 p; varying vec2 t;
void main() { t = vec2((p.x + 1.0) * 0.5, (1.0 - p.y) * 0.5); gl_Position = vec4(p, 0.0, 1.0); }`;
/** highp: the conversion needs a byte's precision after scaling by 1.164 (mediump's 10 bits would lose levels). */
const FRAGMENT = `precision highp float; varying vec2 t; uniform sampler2D y, u, v;
void main() {
  float yy = 1.164 * (texture2D(y, t).r * 255.0 - 16.0);
  float uu = texture2D(u, t).r * 255.0 - 128.0;
  float vv = texture2D(v, t).r * 255.0 - 128.0;
  gl_FragColor = vec4(vec3(yy + 1.596 * vv, yy - 0.392 * uu - 0.813 * vv, yy + 2.017 * uu) / 255.0, 1.0);
}`;

/** A drawer of I420 frames onto `canvas` by WebGL, or null when the browser gives no WebGL context. */
export function i420WebGlDrawer(canvas: HTMLCanvasElement): ((frame: I420Frame) => void) | null {
  const gl = canvas.getContext('webgl', { alpha: false, antialias: false, preserveDrawingBuffer: true });
  if (!gl) return null;
  const shader = (type: number, source: string) => {
    const s = gl.createShader(type)!;
    gl.shaderSource(s, source);
    gl.compileShader(s);
    return s;
  };
  const program = gl.createProgram()!;
  gl.attachShader(program, shader(gl.VERTEX_SHADER, VERTEX));
  gl.attachShader(program, shader(gl.FRAGMENT_SHADER, FRAGMENT));
  gl.linkProgram(program);
  if (!gl.getProgramParameter(program, gl.LINK_STATUS)) return null;
  gl.useProgram(program);
  gl.bindBuffer(gl.ARRAY_BUFFER, gl.createBuffer());
  gl.bufferData(gl.ARRAY_BUFFER, new Float32Array([-1, -1, 1, -1, -1, 1, 1, 1]), gl.STATIC_DRAW);
  const at = gl.getAttribLocation(program, 'p');
  gl.enableVertexAttribArray(at);
  gl.vertexAttribPointer(at, 2, gl.FLOAT, false, 0, 0);
  gl.pixelStorei(gl.UNPACK_ALIGNMENT, 1);
  const textures = ['y', 'u', 'v'].map((name, i) => {
    const texture = gl.createTexture();
    gl.activeTexture(gl.TEXTURE0 + i);
    gl.bindTexture(gl.TEXTURE_2D, texture);
    for (const p of [gl.TEXTURE_MIN_FILTER, gl.TEXTURE_MAG_FILTER]) gl.texParameteri(gl.TEXTURE_2D, p, gl.NEAREST);
    for (const p of [gl.TEXTURE_WRAP_S, gl.TEXTURE_WRAP_T]) gl.texParameteri(gl.TEXTURE_2D, p, gl.CLAMP_TO_EDGE);
    gl.uniform1i(gl.getUniformLocation(program, name), i);
    return texture;
  });
  return (frame) => {
    const { width, height, data } = frame;
    const cw = (width + 1) >> 1;
    const ch = (height + 1) >> 1;
    const planes = [
      [width, height, data.subarray(0, width * height)],
      [cw, ch, data.subarray(width * height, width * height + cw * ch)],
      [cw, ch, data.subarray(width * height + cw * ch, width * height + 2 * cw * ch)],
    ] as const;
    planes.forEach(([w, h, plane], i) => {
      gl.activeTexture(gl.TEXTURE0 + i);
      gl.bindTexture(gl.TEXTURE_2D, textures[i]);
      gl.texImage2D(gl.TEXTURE_2D, 0, gl.LUMINANCE, w, h, 0, gl.LUMINANCE, gl.UNSIGNED_BYTE, plane);
    });
    gl.viewport(0, 0, width, height);
    gl.drawArrays(gl.TRIANGLE_STRIP, 0, 4);
  };
}
