// Live captions over the avatar: each SSE `caption` shows as its sentence starts to be heard (the service sends it
// then, docs/events.md) and goes when the sentence ends or the turn is interrupted. Kept apart from the element's
// layout: give it the box the video sits in (positioned), it adds and owns one small line at its bottom.
import type { AvatarClient } from './avatar-client.ts';

/** Shows `client`'s captions over `stage`; returns the teardown (removes the line and its listeners). */
export function showLiveCaptions(client: AvatarClient, stage: HTMLElement): () => void {
  const line = document.createElement('p');
  line.className = 'live-caption';
  line.setAttribute('part', 'caption');
  // The transcript list already reads the reply to screen readers; this is its visual echo.
  line.setAttribute('aria-hidden', 'true');
  line.hidden = true;
  Object.assign(line.style, {
    position: 'absolute',
    left: '8px',
    right: '8px',
    bottom: '8px',
    margin: '0',
    padding: '2px 8px',
    textAlign: 'center',
    fontSize: '.85rem',
    lineHeight: '1.3',
    color: '#fff',
    background: '#000a',
    borderRadius: '6px',
    pointerEvents: 'none',
  });
  stage.append(line);
  let hideTimer: ReturnType<typeof setTimeout> | undefined;
  const hide = () => {
    clearTimeout(hideTimer);
    line.hidden = true;
  };
  const offs = [
    client.on('caption', ({ text, start_ms, end_ms }) => {
      clearTimeout(hideTimer);
      line.textContent = text;
      line.hidden = false;
      hideTimer = setTimeout(hide, Math.max(0, end_ms - start_ms) + 300);
    }),
    client.on('status', ({ stage: status }) => {
      if (status === 'interrupted' || status === 'idle') hide();
    }),
  ];
  return () => {
    hide();
    for (const off of offs) off();
    line.remove();
  };
}
