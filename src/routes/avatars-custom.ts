import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import {
  IMAGE_STEP_DEADLINE_MS,
  MAX_AVATAR_NAME_LENGTH,
  MAX_RUNNING_IMAGE_JOBS,
  MAX_WAITING_IMAGE_JOBS,
  MAX_CLIP_BYTES,
  MAX_CLIP_FRAME_RATE,
  MAX_CLIP_SECONDS,
  MAX_CLIP_SIDE,
  MIN_CLIP_SECONDS,
  MAX_PORTRAIT_BYTES,
  MAX_PORTRAIT_PIXELS,
  MAX_PORTRAIT_SIDE,
  admitCustomAvatarUpload,
  closeImageWorkers,
  createCustomAvatar,
  openCustomAvatarUpload,
  type CustomAvatarUpload,
} from '../catalog/custom-avatar.ts';
import { DomainError } from '../domain-errors.ts';
import { httpErrorOf } from '../plugins/app/errors.ts';
import { errors } from '../schemas/common.ts';
import { badRequest, notFound } from '../errors.ts';
import { readMultipart } from '../http/multipart.ts';
import { multipartForm } from '../schemas/multipart-form.ts';
import { closedSignal } from '../http/closed-signal.ts';
import { CreationProgress, UPLOAD_ID_PATTERN } from '../catalog/creation-progress.ts';

/** Documents the multipart body (validation happens while the parts stream in). */
const CustomAvatarForm = Type.Object(
  {
    name: Type.String({
      minLength: 1,
      maxLength: MAX_AVATAR_NAME_LENGTH,
      description: 'Display name; its slug goes into the new id',
      example: 'Ada',
    }),
    base_avatar_id: Type.String({
      description: 'Existing avatar with model_type `lipsync`; its manifest (fps, size, sample rate, …) is copied',
      example: 'astronaut',
    }),
    image: Type.Optional(
      Type.String({
        format: 'binary',
        description: `Portrait photo: JPEG, PNG or WebP (detected from the bytes), at most 10 MB, ${MAX_PORTRAIT_PIXELS / 1e6} megapixels and ${MAX_PORTRAIT_SIDE} px on a side. Exactly one of \`image\` and \`video\`.`,
      }),
    ),
    video: Type.Optional(
      Type.String({
        format: 'binary',
        description:
          `Clip of a person facing the camera (a video avatar): MP4, MOV, WebM or Matroska (detected from the bytes) whose first video stream is ` +
          `H.264, VP8 or VP9, at most ${MAX_CLIP_BYTES / (1024 * 1024)} MB, ${MIN_CLIP_SECONDS}–${MAX_CLIP_SECONDS} s, ${MAX_CLIP_SIDE} px on a side and ` +
          `${MAX_CLIP_FRAME_RATE} frames a second, measured from the stream (metadata is not trusted); the stream's rotation is honoured, other streams ` +
          'and audio ignored. Manifests, playlists and scripts (HLS, DASH, ffconcat) are not clips. Exactly one of `image` and `video`.',
      }),
    ),
    upload_id: Type.Optional(
      Type.String({
        pattern: UPLOAD_ID_PATTERN,
        description:
          'Added field: a client-chosen id (8–64 letters, digits, `_`, `-`) under which GET /avatars/custom/uploads/{upload_id} reports the processing phase while this request runs',
      }),
    ),
  },
  { $id: 'CustomAvatarForm' },
);

/** Spec 4.2: custom avatar creation from a portrait photo. */
const customAvatarRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { catalog, webhooks } = app.services;
  const progress = new CreationProgress();
  app.addSchema(CustomAvatarForm);
  app.addHook('onClose', closeImageWorkers);

  app.post('/avatars/custom', {
    schema: {
      tags: ['avatars'],
      summary: 'Create a custom avatar from a portrait or a clip',
      description:
        'multipart/form-data (see CustomAvatarForm): `name`, `base_avatar_id`, `image`. The image is checked by its magic number ' +
        `(JPEG, PNG, WebP) and its size from its header (at most ${MAX_PORTRAIT_PIXELS / 1e6} megapixels and ${MAX_PORTRAIT_SIDE} px on a side, ` +
        'refused before any pixel is decoded); it is then decoded in a separate image process (one upload at a time, each step ' +
        `within ${IMAGE_STEP_DEADLINE_MS / 1000} s), turned upright by its EXIF orientation, converted to RGB and cover-cropped to ` +
        "the base avatar's size, centred on the face. Face-landmark detection then fills `metadata.animation` (mouth and eye geometry " +
        'in frame pixels); when no single clear face is found the avatar is still created, without `animation` (a still image), and the ' +
        'answer says so: `animated: false` with a human `reason` (no face, several faces, too unclear). The ' +
        "manifest is the base's with `id` (`custom-<slug>-<timestamp>`), `name`, `metadata.custom_avatar=true` and " +
        '`metadata.base_avatar_id`. The bundle appears atomically. 400: malformed multipart body (no boundary, truncated, too many ' +
        'fields or files), name/base/image missing, image empty, not JPEG/PNG/WebP, ' +
        'undecodable, too many pixels or too long a side, too slow to decode, or base avatar not `lipsync`. 404: base avatar unknown. ' +
        '413: image over 10 MB (refused while uploading). 503 {detail} with Retry-After: too many avatars are already being created ' +
        `(${MAX_RUNNING_IMAGE_JOBS} decoded and ${MAX_WAITING_IMAGE_JOBS} waiting, photos and clips together; a place is taken once the body is in, ` +
        'and the body is not read while every place is held), or too many upload bytes are arriving at once (refused while uploading). ' +
        'With `video` instead of `image` the avatar is a video avatar: the clip is decoded by ffmpeg in its own process (upright, 25 fps, ' +
        "cropped around the face to the base avatar's size; its first 6 s become an idle loop played forwards and backwards) and its face " +
        'is tracked per frame (`metadata.clip`, `face_track.json`); when the person speaks in the clip, their own mouths are kept ' +
        '(`metadata.clip.mouths`, `mouths/`) and shown while the avatar speaks. ffmpeg opens the clip only as the container its bytes name, ' +
        'only as that one file (it fetches no URL and reads no other file a manifest names) and only its first video stream. 400 also: video empty, ' +
        'not MP4/MOV/WebM/Matroska (a manifest or script included), no video stream (audio only), a codec other than H.264, VP8 or VP9 (the detail names it), ' +
        `truncated or undecodable, shorter than ${MIN_CLIP_SECONDS} s or longer than ${MAX_CLIP_SECONDS} s, over ${MAX_CLIP_SIDE} px on a side or ` +
        `${MAX_CLIP_FRAME_RATE} frames a second, or no usable face in the clip. ` +
        `413 also: video over ${MAX_CLIP_BYTES / (1024 * 1024)} MB.`,
      ...multipartForm(CustomAvatarForm),
      response: { 200: Type.Ref('AvatarSummary'), ...errors(400, 404, 413, 503) },
    },
    handler: async (request, reply) => {
      // While every creation place is held by an upload that is in, the body is not read (503 + Retry-After);
      // otherwise it is read within the uploads' byte budget, and its place is taken once it is in.
      const upload = openCustomAvatarUpload();
      reply.raw.once('close', upload.release);
      const form = await readMultipart(request, {
        watchFile: (chunk) => receivedOrRefused(upload, chunk.length),
        fileField: 'image',
        maxFileBytes: MAX_PORTRAIT_BYTES,
        tooLargeDetail: `image is larger than ${MAX_PORTRAIT_BYTES / (1024 * 1024)} MB`,
        alternativeFileFields: {
          video: {
            maxFileBytes: MAX_CLIP_BYTES,
            tooLargeDetail: `video is larger than ${MAX_CLIP_BYTES / (1024 * 1024)} MB`,
          },
        },
      });
      const name = form.fields.name;
      const baseAvatarId = form.fields.base_avatar_id;
      if (name === undefined || name.trim() === '') throw badRequest('name is required');
      if (baseAvatarId === undefined || baseAvatarId === '') throw badRequest('base_avatar_id is required');
      if (!form.file) throw badRequest('an image or video file is required');
      reply.raw.once('close', admitCustomAvatarUpload());
      const file = form.file.field === 'video' ? { video: form.file.data } : { image: form.file.data };
      const uploadId = form.fields.upload_id;
      if (uploadId !== undefined && !new RegExp(UPLOAD_ID_PATTERN).test(uploadId))
        throw badRequest('upload_id must be 8–64 letters, digits, _ or -');
      const tracked = uploadId ? progress.track(uploadId, form.file.field === 'video' ? 'video' : 'image') : null;
      try {
        const avatar = await createCustomAvatar({
          catalog,
          name,
          baseAvatarId,
          ...file,
          signal: closedSignal(reply),
          logger: request.log,
          onSaving: () => tracked?.phase('saving'),
        });
        await webhooks.avatarCreated(avatar);
        return avatar;
      } finally {
        tracked?.done();
      }
    },
  });

  app.get('/avatars/custom/uploads/:upload_id', {
    schema: {
      tags: ['avatars'],
      summary: 'Processing phase of a custom avatar being created',
      description:
        'Added route: while a POST /avatars/custom that carried this `upload_id` runs after its upload, its phase: `processing` ' +
        '(decoding the picture or clip and finding the face; a clip takes longest) then `saving` (writing the bundle). 404 before the ' +
        'upload is complete and after the POST answered (its answer is the result), and for unknown ids.',
      params: Type.Object({ upload_id: Type.String({ pattern: UPLOAD_ID_PATTERN }) }),
      response: {
        200: Type.Object({
          phase: Type.Union([Type.Literal('processing'), Type.Literal('saving')]),
          kind: Type.Union([Type.Literal('image'), Type.Literal('video')], { description: 'What was uploaded' }),
          started_at: Type.String({
            format: 'date-time',
            description: 'When processing began (the upload had arrived)',
          }),
        }),
        ...errors(400, 404),
      },
    },
    handler: async (request) => {
      const entry = progress.get(request.params.upload_id);
      if (!entry) throw notFound('no avatar is being created under this upload_id');
      return entry;
    },
  });
};

/** Counts a chunk of the body; past the uploads' byte budget the refusal is answered while the body streams. */
function receivedOrRefused(upload: CustomAvatarUpload, bytes: number): void {
  try {
    upload.received(bytes);
  } catch (error) {
    throw error instanceof DomainError ? httpErrorOf(error) : error;
  }
}

export default customAvatarRoutes;
