"""Schedules in the database for both backends: those made with the tools, and the claimed
ticks of every schedule (one row per schedule and tick time, its primary key), so a tick is
claimed once across replicas and restarts (docs/schedules.md#one-session-per-tick)."""

from __future__ import annotations

from typing import Any

from parley.core.schedules import Schedule, TickClaim, TickRecord, TickStatus, Timing
from parley.storage.sql.base import SqlBase
from parley.storage.sql.program import Row, Stmt

_TICK_COLUMNS = "schedule, tick_at, status, session_id, claimed_at"
_SCHEDULE_COLUMNS = "name, definition, owner, created_by, created_at, paused"


def tick_claim(tick: TickClaim, session_id: str, now: float) -> Stmt:
    """The statement that claims `tick` for the session `session_id`: it changes no row when
    another start claimed the tick first."""
    if tick.queued:
        return Stmt(
            "UPDATE schedule_ticks SET status = 'started', session_id = ?, claimed_at = ? "
            "WHERE schedule = ? AND tick_at = ? AND status = 'queued'",
            (session_id, now, tick.schedule, tick.tick_at),
        )
    return Stmt(
        f"INSERT INTO schedule_ticks ({_TICK_COLUMNS}) VALUES (?, ?, 'started', ?, ?) ON CONFLICT DO NOTHING",
        (tick.schedule, tick.tick_at, session_id, now),
    )


def _tick(row: Row) -> TickRecord:
    return TickRecord(
        schedule=row[0], tick_at=float(row[1]), status=row[2], session_id=row[3], claimed_at=float(row[4])
    )


def definition_of(schedule: Schedule) -> dict[str, Any]:
    """What a stored schedule's definition column holds: everything but its name and owner."""
    timing = schedule.timing
    return {
        "every_s": timing.every_s,
        "cron": timing.cron,
        "timezone": timing.tz,
        "agent": schedule.agent,
        "message": schedule.message,
        "inputs": schedule.inputs,
        "tags": list(schedule.tags),
        "overlap": schedule.overlap,
        "catch_up": schedule.catch_up,
    }


class SqlSchedules(SqlBase):
    async def create_schedule(self, schedule: Schedule) -> bool:
        (result,) = await self._change(
            Stmt(
                f"INSERT INTO schedules ({_SCHEDULE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (
                    schedule.name,
                    self.dialect.json(definition_of(schedule)),
                    schedule.owner,
                    schedule.created_by or schedule.owner,
                    schedule.created_at or 0.0,
                    schedule.paused,
                ),
            )
        )
        return result.count > 0

    async def list_schedules(self) -> list[Schedule]:
        rows = await self._rows(f"SELECT {_SCHEDULE_COLUMNS} FROM schedules ORDER BY name")
        return [self._schedule(row) for row in rows]

    def _schedule(self, row: Row) -> Schedule:
        spec = self.dialect.load_json(row[1])
        return Schedule(
            name=row[0],
            timing=Timing(every_s=spec["every_s"], cron=spec["cron"], tz=spec["timezone"]),
            agent=spec["agent"],
            owner=row[2],
            message=spec["message"],
            inputs=spec["inputs"],
            tags=tuple(spec["tags"]),
            overlap=spec["overlap"],
            catch_up=spec["catch_up"],
            source="database",
            paused=bool(row[5]),
            created_by=row[3],
            created_at=float(row[4]),
        )

    async def set_schedule_paused(self, name: str, paused: bool) -> bool:
        (result,) = await self._change(Stmt("UPDATE schedules SET paused = ? WHERE name = ?", (paused, name)))
        return result.count > 0

    async def delete_schedule(self, name: str) -> bool:
        results = await self._change(
            Stmt("DELETE FROM schedules WHERE name = ?", (name,)),
            Stmt("DELETE FROM schedule_ticks WHERE schedule = ?", (name,)),
        )
        return results[0].count > 0

    async def latest_ticks(self) -> dict[str, tuple[TickRecord, str | None]]:
        rows = await self._rows(
            f"SELECT {_TICK_COLUMNS}, "
            "(SELECT s.status FROM schedule_ticks r LEFT JOIN sessions s ON s.id = r.session_id "
            " WHERE r.schedule = t.schedule AND r.status = 'started' ORDER BY r.tick_at DESC LIMIT 1) "
            "FROM schedule_ticks t "
            "WHERE t.tick_at = (SELECT MAX(m.tick_at) FROM schedule_ticks m WHERE m.schedule = t.schedule)"
        )
        return {row[0]: (_tick(row), row[5]) for row in rows}

    async def queued_ticks(self) -> list[TickRecord]:
        rows = await self._rows(
            f"SELECT {_TICK_COLUMNS} FROM schedule_ticks WHERE status = 'queued' ORDER BY tick_at"
        )
        return [_tick(row) for row in rows]

    async def claim_tick(self, schedule: str, tick_at: float, status: TickStatus, now: float) -> bool:
        (result,) = await self._change(
            Stmt(
                f"INSERT INTO schedule_ticks ({_TICK_COLUMNS}) VALUES (?, ?, ?, NULL, ?) ON CONFLICT DO NOTHING",
                (schedule, tick_at, status, now),
            )
        )
        return result.count > 0

    async def prune_ticks(self, before: float) -> int:
        (result,) = await self._change(
            Stmt(
                # Each schedule's latest tick, and its latest that started a session (whether that
                # one still runs decides overlap), stay.
                "DELETE FROM schedule_ticks WHERE claimed_at < ? AND status <> 'queued' AND tick_at < "
                "(SELECT MAX(m.tick_at) FROM schedule_ticks m WHERE m.schedule = schedule_ticks.schedule) "
                "AND tick_at < (SELECT MAX(m.tick_at) FROM schedule_ticks m "
                "WHERE m.schedule = schedule_ticks.schedule AND m.status = 'started')",
                (before,),
            )
        )
        return result.count
