"""Hostile payloads and hand-edited state: each must be handled, never a traceback,
never a payload byte on a command line it could break, never another item's session."""

from __future__ import annotations

import sqlite3

import pytest

from loop_dispatch import lock as locking
from loop_dispatch.adapters import ClaudeCodeAdapter
from loop_dispatch.dispatcher import OutcomeKind
from loop_dispatch.framing import frame, spawn_prompt
from loop_dispatch.launch import LaunchSpec
from loop_dispatch.model import WorkItemRef
from loop_dispatch.store import StoreError

REF = WorkItemRef.parse("local:hostile#1")
OTHER = WorkItemRef.parse("local:victim#1")
HOSTILE = "a\x00b\x1b[201~c\x07d\ud800e\udc80f\x9bg\r\nh"


def test_frame_carries_no_control_character_nul_or_lone_surrogate(make_event):
    text = frame(make_event(REF, body=HOSTILE, actor="eve\x1b]52;c;aGk=\x07"))
    assert not [ch for ch in text if ord(ch) < 0x20 and ch not in "\n\t"]
    assert not [ch for ch in text if 0x7F <= ord(ch) <= 0x9F or 0xD800 <= ord(ch) <= 0xDFFF]
    text.encode("utf-8")  # strict: a lone surrogate would raise here
    assert "\u241b[201~" in text  # the escape is shown, not dropped
    prompt, cut = spawn_prompt(make_event(REF, body=HOSTILE))
    assert (prompt, cut) == (frame(make_event(REF, body=HOSTILE)), 0)


def test_an_oversized_author_or_link_cannot_push_a_spawn_prompt_past_its_bound(make_event):
    from dataclasses import replace

    from loop_dispatch.framing import PROMPT_MAX_BYTES

    event = replace(make_event(REF, body="x" * 20_000, actor="a" * 20_000), url="u" * 20_000)
    prompt, cut = spawn_prompt(event)
    assert len(prompt.encode()) <= PROMPT_MAX_BYTES
    assert cut > 0
    assert "x" * 1000 in prompt  # the body, not the header, fills the room


@pytest.mark.tmux
def test_a_body_with_nul_escape_and_surrogates_spawns_on_real_tmux(
    real_tmux, fake_harness, make_dispatcher, make_event, store, read_conversation, wait_for
):
    program, convo = fake_harness

    def launch(record, argv):
        return LaunchSpec(list(argv), {"FAKE_HARNESS_DIR": str(convo)})

    disp = make_dispatcher(
        real_tmux, ClaudeCodeAdapter(binary=str(program), checks=False), launcher=launch
    )
    event = make_event(REF, body=HOSTILE)
    outcome = disp.dispatch(event)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.PROCESSED, "spawned"), outcome
    record = store.registry.get(REF)
    convo_id = record.conversation_id
    starts = wait_for(
        lambda: [r for r in read_conversation(convo, convo_id) if r["event"] == "start"]
    )
    assert starts[0]["prompt"] == frame(event)


def _edit(store, sql, params=()):
    conn = sqlite3.connect(store.path)
    with conn:
        conn.execute(sql, params)
    conn.close()


def test_a_row_whose_tmux_name_is_not_its_own_is_never_used_as_a_target(
    fake_tmux, make_dispatcher, make_event, store, events
):
    store.registry.register(REF, harness="claude-code", conversation_id="c1", cwd="/")
    # Hand-edited to point at another item's session.
    _edit(
        store,
        "UPDATE sessions SET slug = ?, tmux_name = ? WHERE work_item = ?",
        (OTHER.slug(), OTHER.tmux_name(), str(REF)),
    )
    with pytest.raises(StoreError, match="do not belong"):
        store.registry.get(REF)
    # Listing quarantines the row (one line with the remedy) instead of failing.
    assert store.registry.list() == []
    (bad,) = store.registry.quarantined()
    assert bad.key == str(REF)
    assert "do not belong" in bad.line()
    disp = make_dispatcher(fake_tmux.tmux)
    outcome = disp.dispatch(make_event(REF))
    assert outcome.kind is OutcomeKind.FAILED
    assert "state.db" in outcome.detail
    assert OTHER.tmux_name() in outcome.detail
    assert not [v for v in fake_tmux.verbs() if v not in ("-V",)], fake_tmux.verbs()


@pytest.mark.parametrize("tmux_name", ["loop-gh_acme_widgets_7", "bystander", "=x"])
def test_a_row_whose_tmux_name_is_not_its_own_slugs_is_refused(store, tmux_name):
    store.registry.register(REF, harness="claude-code", conversation_id="c1", cwd="/")
    _edit(store, "UPDATE sessions SET tmux_name = ? WHERE work_item = ?", (tmux_name, str(REF)))
    with pytest.raises(StoreError, match="do not belong"):
        store.registry.get(REF)
    with pytest.raises(StoreError, match="do not belong"):
        store.registry.by_tmux_name(tmux_name)


def test_slug_owner_reads_back_every_slug_and_refuses_foreign_ones():
    from loop_dispatch.registry import slug_owner

    for text in ["github:a-b/c#1", "github:a/b-c#1", "github:o/x._y__.z#12", "local:_._#3"]:
        ref = WorkItemRef.parse(text)
        assert slug_owner(ref.slug()) == ref
    for slug in ["legacy", "gh_a_b", "local__x_1", "local_x_01", "gh_a_b_c_d_1", "local_x\x00_1"]:
        assert slug_owner(slug) is None, slug


def test_a_row_with_an_unreadable_timestamp_is_a_store_error(store):
    store.registry.register(REF, harness="claude-code", conversation_id="c1", cwd="/")
    _edit(store, "UPDATE sessions SET updated_at = 'yesterday' WHERE work_item = ?", (str(REF),))
    with pytest.raises(StoreError, match="updated_at"):
        store.registry.get(REF)


def test_a_lock_dir_that_is_a_file_is_a_clear_failure(
    tmp_path, fake_tmux, make_dispatcher, make_event, store
):
    (tmp_path / "locks").write_text("not a directory")
    with (
        pytest.raises(locking.LockUnavailable, match="locks"),
        locking.item_lock(tmp_path / "locks", REF),
    ):
        pass
    disp = make_dispatcher(fake_tmux.tmux)
    event = make_event(REF)
    outcome = disp.dispatch(event)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.FAILED, "lock_unavailable")
    assert str(tmp_path / "locks") in outcome.detail
    assert store.registry.get(REF) is None
    assert disp.close(REF).reason == "lock_unavailable"


@pytest.mark.parametrize(
    "conversation_id", ["--dangerously-skip-permissions", "-e", "", "a b", "x" * 200, "id\n"]
)
def test_a_hand_edited_conversation_id_that_could_act_as_a_flag_is_refused(store, conversation_id):
    store.registry.register(REF, harness="claude-code", conversation_id="c1", cwd="/")
    _edit(
        store,
        "UPDATE sessions SET conversation_id = ? WHERE work_item = ?",
        (conversation_id, str(REF)),
    )
    with pytest.raises(StoreError, match="conversation_id"):
        store.registry.get(REF)


def test_the_remedy_named_for_a_refused_row_removes_it(store):
    import re

    store.registry.register(REF, harness="claude-code", conversation_id="c1", cwd="/")
    _edit(store, "UPDATE sessions SET tmux_name = 'loop-x' WHERE work_item = ?", (str(REF),))
    with pytest.raises(StoreError) as err:
        store.registry.get(REF)
    _edit(store, re.search(r'"(DELETE [^"]+)"', str(err.value)).group(1))
    assert store.registry.get(REF) is None


def test_a_pending_inbox_row_whose_event_names_another_item_is_never_dispatched(store, make_event):
    import json

    event = make_event(REF, delivery_id="comment:t:1")
    store.inbox.accept("t", [event])
    forged = dict(event.to_dict(), workItem=str(OTHER), deliveryId="comment:t:2")
    _edit(
        store,
        "UPDATE inbox SET event = ? WHERE delivery_id = 'comment:t:1'",
        (json.dumps(forged),),
    )
    (entry,) = store.inbox.entries(("pending",))
    assert entry.event is None  # unreadable: given up loudly by the drain, never sent
