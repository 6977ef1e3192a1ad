//! The transcript: what the model has been shown of a run, in order. Not part of the API: the
//! engine keeps it with the run (hidden tool calls included, which `output` leaves out) and
//! builds the next model request, a resumed run or a continuation from it.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::items::Item;

/// One entry of a model's context.
// Nearly every entry is an item: boxing them would cost an allocation each for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    Item(Item),
    /// The end of a model turn: calls of consecutive turns reach the model as separate
    /// assistant messages.
    TurnEnd,
}

impl Entry {
    pub fn item(&self) -> Option<&Item> {
        match self {
            Entry::Item(item) => Some(item),
            Entry::TurnEnd => None,
        }
    }

    pub fn item_mut(&mut self) -> Option<&mut Item> {
        match self {
            Entry::Item(item) => Some(item),
            Entry::TurnEnd => None,
        }
    }
}

impl From<Item> for Entry {
    fn from(item: Item) -> Entry {
        Entry::Item(item)
    }
}

/// How a turn's end is stored: `{"type": "turn_end"}` beside the items.
#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Marker {
    TurnEnd {},
}

/// An entry as stored: the marker is tried first (it fails at once on an item's `type`).
#[allow(clippy::large_enum_variant)]
#[derive(Deserialize)]
#[serde(untagged)]
enum Stored {
    Marker(Marker),
    Item(Item),
}

impl Serialize for Entry {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Entry::Item(item) => item.serialize(serializer),
            Entry::TurnEnd => Marker::TurnEnd {}.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Entry, D::Error> {
        Ok(match Stored::deserialize(deserializer)? {
            Stored::Marker(Marker::TurnEnd {}) => Entry::TurnEnd,
            Stored::Item(item) => Entry::Item(item),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::items::{Message, Role};

    #[test]
    fn entries_are_stored_as_items_and_turn_end_markers_and_read_back_alike() {
        let entries = vec![
            Entry::Item(Item::Message(Message {
                id: "msg_1".into(),
                role: Role::Assistant,
                content: Vec::new(),
                status: None,
                phase: None,
            })),
            Entry::TurnEnd,
        ];
        let text = serde_json::to_string(&entries).unwrap();
        assert!(text.contains(r#"{"type":"turn_end"}"#), "{text}");
        let back: Vec<Entry> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, entries);
        // As stored before the marker had a type of its own.
        let old: Vec<Entry> = serde_json::from_str(r#"[{"type":"turn_end"}]"#).unwrap();
        assert_eq!(old, vec![Entry::TurnEnd]);
    }
}
