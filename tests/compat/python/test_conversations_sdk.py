"""The Conversations API through the `openai` Python SDK with strict validation: every
endpoint, and auto-pagination of a conversation's items both ways."""

from __future__ import annotations

import openai
import pytest


def _message(text: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _texts(items) -> list[str]:
    return [item.content[0].text for item in items]


def test_every_conversation_endpoint_through_the_sdk(client: openai.OpenAI) -> None:
    conversation = client.conversations.create(
        metadata={"topic": "sdk"}, items=[_message("one"), _message("two")]
    )
    assert conversation.object == "conversation"
    assert conversation.id.startswith("conv_") and len(conversation.id) == 53
    assert conversation.metadata == {"topic": "sdk"}

    again = client.conversations.retrieve(conversation.id)
    assert again == conversation
    updated = client.conversations.update(conversation.id, metadata={"topic": "changed"})
    assert updated.metadata == {"topic": "changed"}

    added = client.conversations.items.create(
        conversation.id,
        items=[_message(str(n)) for n in range(3, 26)][:20],
    )
    assert added.object == "list"
    assert len(added.data) == 20
    more = client.conversations.items.create(
        conversation.id, items=[_message(str(n)) for n in range(23, 26)]
    )
    assert [item.type for item in more.data] == ["message"] * 3

    # 25 items over pages of 7, auto-paginated both ways.
    oldest_first = list(client.conversations.items.list(conversation.id, order="asc", limit=7))
    assert _texts(oldest_first) == ["one", "two"] + [str(n) for n in range(3, 26)]
    newest_first = list(client.conversations.items.list(conversation.id, limit=7))
    assert _texts(newest_first) == list(reversed(_texts(oldest_first)))
    first_page = client.conversations.items.list(conversation.id, order="asc", limit=7)
    assert first_page.has_more is True
    assert first_page.first_id == oldest_first[0].id
    assert first_page.last_id == oldest_first[6].id

    item = client.conversations.items.retrieve(oldest_first[1].id, conversation_id=conversation.id)
    assert item.id == oldest_first[1].id
    assert item.type == "message" and item.role == "user"

    after_delete = client.conversations.items.delete(item.id, conversation_id=conversation.id)
    assert after_delete.id == conversation.id
    assert after_delete.object == "conversation"
    remaining = list(client.conversations.items.list(conversation.id, order="asc", limit=100))
    assert len(remaining) == 24 and item.id not in {i.id for i in remaining}

    with pytest.raises(openai.BadRequestError) as refused:
        client.conversations.items.create(conversation.id, items=[remaining[0].model_dump()])
    assert refused.value.message.endswith(f"Duplicate item found with id {remaining[0].id}.")

    deleted = client.conversations.delete(conversation.id)
    assert deleted.deleted is True
    assert deleted.object == "conversation.deleted"
    assert deleted.id == conversation.id
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conversation.id)
