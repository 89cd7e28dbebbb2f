// Browser test of the UI, functions: The function table: a live profile filling it, its count, a half-typed filter.
// Steps run in order by test/ui/ui_test.mjs, which passes each the state the earlier ones left (t).
import { check } from '../harness.mjs';

export async function liveTable(t) {
  const { demo, http, fetch, page } = t;
  // A loaded machine may deliver a first chunk with only a few samples: wait until the live
  // profile holds enough for every worker and for a heat map, as a user watching it would.
  t.doing = 'waiting for the live profile to fill';
  await page.waitForFunction(() => {
    const n = Number(document.querySelector('#session-info').textContent.match(/(\d+) samples/)?.[1] || 0);
    const names = document.querySelector('#functions tbody').textContent;
    return n >= 400 && names.includes('matrix_multiply') && names.includes('hash_strings');
  }, null, { timeout: 45000 }).catch(() => {});
  const matrix = page.locator('#functions tbody tr', { hasText: 'matrix_multiply' });
  check(await matrix.count() > 0 && await page.locator('#functions tbody tr', { hasText: 'hash_strings' }).count() > 0,
    `the function table names the demo's hot functions (${await page.locator('#session-info').textContent()})`);
  check(/session=[^&]+/.test(page.url()) && page.url().includes('tab=functions'), 'the session is in the URL');
  // The count and the rows read at once: a live table may gain a function between two reads.
  const [shownCount, shownRows] = await page.evaluate(() => [Number(document.querySelector('#functions-count').textContent.replace(/[^\d]/g, '')),
    document.querySelectorAll('#functions tbody tr[data-function]').length]);
  const session = new URLSearchParams(new URL(page.url()).hash.slice(1)).get('session');
  const apiCount = (await (await fetch(`${http}/api/sessions/${session}/functions`)).json()).functions.length;
  // A live profile only gains functions: the count the page showed cannot exceed a later answer.
  check(shownCount >= shownRows && shownCount <= apiCount,
    `the table counts every function (${shownCount} counted, ${apiCount} in a later answer)`);
  // The pointer resting on the live table: its numbers keep coming (the header's count and
  // the rows' own), the rows keep their places meanwhile.
  t.doing = 'resting the pointer on the live table';
  const numbers = () => page.evaluate(() => [...document.querySelectorAll('#functions tbody tr[data-function]')].map((tr) => `${tr.dataset.function}=${tr.cells[0].textContent}/${tr.querySelector('td.num').title}`));
  const names = (rows) => rows.map((r) => r.split('=')[0]);
  await matrix.first().hover();
  const under = await numbers();
  await page.waitForTimeout(5000);
  const after = await numbers();
  const hovered = await page.locator('#functions-scroll').evaluate((e) => e.matches(':hover'));
  const changed = after.filter((r, i) => r !== under[i]).length;
  check(hovered && changed > 0 && JSON.stringify(names(after).slice(0, under.length)) === JSON.stringify(names(under)),
    `the pointer resting on the live table for 5 s sees it update in place (${changed} of ${after.length} rows changed, none moved${await page.locator('#functions-held').count() ? `; ${await page.locator('#functions-held').textContent()}` : ''})`);
  await page.mouse.move(1, 1);
  Object.assign(t, { matrix, session });
}

export async function halfTypedFilter(t) {
  const { http, session, again, drawn } = t;
  // A half-typed regex in the filter: said next to the box, the views keep showing everything.
  t.doing = "a half-typed filter";
  await again.goto(`${http}/#session=${session}&tab=flamegraph`);
  await again.waitForFunction(() => Number(document.querySelector('#flame').dataset.boxes) > 1, null, { timeout: 15000 });
  await again.fill('#filter', 'hash_(');
  await again.locator('#filter-error').waitFor({ timeout: 5000 });
  const said = await again.locator('#filter-error').textContent();
  const framesDrawn = Number(await again.locator('#flame').getAttribute('data-boxes'));
  await again.fill('#filter', 'hash_(s|x)');
  await again.locator('#filter-error').waitFor({ state: 'hidden', timeout: 5000 });
  check(framesDrawn > 1 && /incomplete pattern/.test(said), `an incomplete regex is said ("${said}"), and the flame graph stays drawn (${framesDrawn} frames)`);
  await again.fill('#filter', '');
}
