/**
 * What a crash leaves behind is removed at start-up, before the service listens, so no request can race
 * the sweep. Each directory's owner decides what in it is a leftover (temp names, files no record points
 * to); this only runs them all and logs one line with what went.
 */
import type { Logger } from 'pino';
import { errorForLog } from './logger.ts';
import { sweepBundleLeftovers } from './catalog/bundle-fs.ts';
import type { OfflineJobs } from './recording/offline-jobs.ts';
import type { RecordingRegistry } from './recording/registry.ts';
import type { VoiceCatalogStore as VoiceCatalog } from './voices/catalog.ts';
import { sweepConversionLeftovers } from './voices/convert.ts';
import { sweepVoiceFiles } from './voices/sweep.ts';
import type { VoiceUploads } from './voices/uploads.ts';

export interface StartupSweepParts {
  voices: VoiceCatalog;
  voiceDir: string;
  uploads: VoiceUploads;
  avatarsDir: string;
  recordings: RecordingRegistry;
  jobs: Pick<OfflineJobs, 'recover'>;
  /**
   * Cluster mode: the data and avatars directories are shared with other nodes, whose uploads, clones and
   * renders may be in progress, so the sweeps of shared files are skipped (leftovers only cost disk space).
   */
  shared?: boolean;
  /** Cluster mode: this node's tag in hidden avatar build/trash directory names; only those are swept. */
  avatarTag?: string;
}

export interface StartupSweepReport {
  orphanReferenceWavs: number;
  temporaryReferenceWavs: number;
  uploadSamples: number;
  avatarDirs: number;
  conversionDirs: number;
  recordingFiles: number;
  bundleFiles: number;
  interruptedJobs: number;
  ms: number;
}

/**
 * Runs every owner's sweep. A sweep that fails (a directory the service cannot read) is logged and counts
 * nothing: leftovers only cost disk space, which is no reason to refuse to start.
 */
export async function sweepStartupLeftovers(parts: StartupSweepParts, logger: Logger): Promise<StartupSweepReport> {
  const started = performance.now();
  const attempt = async <T>(what: string, sweep: Promise<T>, nothing: T): Promise<T> => {
    try {
      return await sweep;
    } catch (error) {
      logger.warn({ what, err: errorForLog(error) }, 'start-up sweep step failed');
      return nothing;
    }
  };
  const [voiceFiles, uploadSamples, avatarDirs, conversionDirs, recordingFiles, jobs] = await Promise.all([
    parts.shared
      ? { orphanReferences: 0, temporaryFiles: 0 }
      : attempt('voice references', sweepVoiceFiles({ catalog: parts.voices, voiceDir: parts.voiceDir }), {
          orphanReferences: 0,
          temporaryFiles: 0,
        }),
    parts.shared ? 0 : attempt('clone samples', parts.uploads.recover(), 0),
    parts.shared && !parts.avatarTag
      ? 0
      : attempt(
          'avatar bundles',
          sweepBundleLeftovers(parts.avatarsDir, parts.shared ? parts.avatarTag : undefined),
          0,
        ),
    attempt('conversion temp dirs', sweepConversionLeftovers(), 0),
    attempt('recordings', parts.recordings.recover(), 0),
    attempt('offline jobs', parts.jobs.recover(), { interruptedJobs: 0, filesRemoved: 0 }),
  ]);
  const report: StartupSweepReport = {
    orphanReferenceWavs: voiceFiles.orphanReferences,
    temporaryReferenceWavs: voiceFiles.temporaryFiles,
    uploadSamples,
    avatarDirs,
    conversionDirs,
    recordingFiles,
    bundleFiles: jobs.filesRemoved,
    interruptedJobs: jobs.interruptedJobs,
    ms: Math.round(performance.now() - started),
  };
  logger.info(report, 'start-up sweep complete');
  return report;
}
