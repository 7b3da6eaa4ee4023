// The "Schedules" view: every schedule with when it ticks, its last run and its next run, read
// from GET /v1/schedules (admins only: anyone else is told so). Read-only: schedules are made in
// parley.yaml or with the schedule tools.

import { api } from './api.js';
import { byId, el, say, when } from './dom.js';

function timing(schedule) {
  if (schedule.every_s !== null) return `every ${schedule.every_s} s`;
  return `${schedule.cron} (${schedule.timezone})`;
}

function lastRun(last) {
  if (!last) return el('span', { class: 'hint', text: 'not yet' });
  const words = { started: 'started', skipped: 'skipped (the previous run still ran)', queued: 'waiting for the previous run' };
  const at = el('span', { text: `${when(last.tick_at)}: ${words[last.status] || last.status}` });
  if (!last.session_id) return at;
  return el('span', {}, at, ' ', el('a', { href: `#/s/${last.session_id}`, text: 'open' }));
}

function row(schedule) {
  const state = schedule.paused ? 'paused' : schedule.source === 'config' ? 'parley.yaml' : 'made with the tools';
  return el(
    'tr',
    { data: { name: schedule.name } },
    el('th', { scope: 'row', text: schedule.name }),
    el('td', { text: timing(schedule) }),
    el('td', { text: `${schedule.agent} for ${schedule.owner}` }),
    el('td', { class: 'schedule-last' }, lastRun(schedule.last_run)),
    el('td', { class: 'schedule-next', text: schedule.next_run ? when(schedule.next_run) : '-' }),
    el('td', { text: state }),
  );
}

export async function showSchedules() {
  const body = byId('schedule-rows');
  const note = byId('schedules-note');
  try {
    const { schedules } = await api.get('/v1/schedules');
    body.replaceChildren(...schedules.map(row));
    byId('schedules-table').hidden = schedules.length === 0;
    say(note, schedules.length === 0 ? 'No schedules: add them under schedules: in parley.yaml, or with create_schedule.' : '');
  } catch (error) {
    body.replaceChildren();
    byId('schedules-table').hidden = true;
    say(note, error.kind === 'not-admin' ? 'Schedules are shown to administrators (the scope parley:admin).' : error.message);
  }
}
