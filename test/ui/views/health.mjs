// Browser test of the UI, health: The device-health strip of a live session, and a time window dragged across it.
// Steps run in order by test/ui/ui_test.mjs, which passes each the state the earlier ones left (t).
import { check, start, tableShows } from '../harness.mjs';

export async function deviceHealth(t) {
  const { drawn, health, wz } = t;
  t.doing = "the device-health strip";
  await wz.waitForFunction(() => /%/.test(document.querySelector('#h-cpu').textContent) && document.querySelector('#h-cpu-line polyline'), null, { timeout: 20000 });
  const cpu = await wz.locator('#h-cpu').textContent();
  check(/^\d+ %$/.test(cpu) && await wz.locator('#h-cpu-line polyline').count() === 1, `device health shows CPU ${cpu} and a sparkline`);
  check((await wz.locator('#h-cores i').count()) >= 1, 'per-core bars are drawn');
  await wz.waitForFunction(() => document.querySelectorAll('#h-cpu-line polyline')[0]?.getAttribute('points').split(' ').length >= 2, null, { timeout: 20000 });
  t.doing = "selecting a time window";
  // The device strip is in the summary under the title, opened as a user opens it.
  if (!await wz.locator('#summary').evaluate((d) => d.open)) await wz.locator('#summary > summary').click();
  const box = await wz.locator('#h-cpu-line').boundingBox();
  await wz.mouse.move(box.x + 2, box.y + box.height / 2);
  await wz.mouse.down();
  await wz.mouse.move(box.x + box.width - 2, box.y + box.height / 2, { steps: 5 });
  await wz.mouse.up();
  await wz.waitForFunction(() => location.hash.includes('start=') && location.hash.includes('end='), null, { timeout: 5000 });
  const chosen = new URLSearchParams(new URL(wz.url()).hash.slice(1));
  check(Number(chosen.get('end')) > Number(chosen.get('start')), `dragging across the CPU chart selects a time window (${chosen.get('start')}–${chosen.get('end')} s)`);
  await tableShows(wz, { start: chosen.get('start'), end: chosen.get('end') });
  check(await wz.locator('#functions tbody tr[data-function]').count() > 0, 'the functions view answers for the window');
  Object.assign(t, { cpu });
}
