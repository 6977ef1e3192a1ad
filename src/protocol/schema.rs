//! Pieces of JSON Schema for the OpenAPI document (`GET /openapi.json`), for the fields the
//! service parses by hand from JSON values (`input`, `tools`, `tool_choice`, `text`, …) so
//! that it can name the path of every problem. Their schemas are written beside their parsers
//! with these helpers; every other wire type derives its schema (`utoipa::ToSchema`) from its
//! serde attributes.

use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{
    AllOfBuilder, AnyOfBuilder, ArrayBuilder, ArrayItems, Object, ObjectBuilder, OneOfBuilder, Ref,
    Schema, SchemaType, Type,
};

/// `{"type": "string"}`
pub fn string() -> Object {
    Object::with_type(Type::String)
}

/// A string or `null`.
pub fn nullable_string() -> Object {
    ObjectBuilder::new()
        .schema_type(or_null(Type::String))
        .build()
}

/// `[type, "null"]`
pub fn or_null(kind: Type) -> SchemaType {
    SchemaType::from_iter([kind, Type::Null])
}

/// Exactly this string.
pub fn constant(value: &str) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some([value]))
        .build()
}

/// One of these strings.
pub fn one_of_strings(values: &[&str]) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(values.iter().copied()))
        .build()
}

/// A list of the named schema.
pub fn array_of<T: ToSchema>() -> ArrayBuilder {
    ArrayBuilder::new().items(reference::<T>())
}

/// A list of items of this schema.
pub fn array(items: impl Into<RefOr<Schema>>) -> ArrayBuilder {
    ArrayBuilder::new().items(ArrayItems::RefOrSchema(Box::new(items.into())))
}

/// A list of strings.
pub fn strings() -> ArrayBuilder {
    ArrayBuilder::new().items(string())
}

/// `$ref` to the named schema.
pub fn reference<T: ToSchema>() -> Ref {
    Ref::from_schema_name(T::name())
}

/// An object whose `type` is `tag`, with the given properties; other properties are allowed
/// (the service accepts and ignores, or echoes, them).
pub fn tagged(tag: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("type", constant(tag))
        .required("type")
}

/// The named schema, with `type` set to `tag`: a variant of a union tagged by `type` whose
/// fields are a type of their own.
pub fn tagged_ref<T: ToSchema>(tag: &str) -> Schema {
    Schema::AllOf(
        AllOfBuilder::new()
            .item(reference::<T>())
            .item(tagged(tag))
            .build(),
    )
}

/// Exactly one of these schemas (they exclude each other, by `type` or by JSON type).
pub fn one_of(items: impl IntoIterator<Item = RefOr<Schema>>) -> Schema {
    let mut builder = OneOfBuilder::new();
    for item in items {
        builder = builder.item(item);
    }
    Schema::OneOf(builder.build())
}

/// At least one of these schemas (they may overlap).
pub fn any_of(items: impl IntoIterator<Item = RefOr<Schema>>) -> Schema {
    let mut builder = AnyOfBuilder::new();
    for item in items {
        builder = builder.item(item);
    }
    Schema::AnyOf(builder.build())
}

/// A schema with a description.
pub fn described(description: &str, schema: impl Into<RefOr<Schema>>) -> RefOr<Schema> {
    match schema.into() {
        RefOr::T(Schema::Object(mut object)) => {
            object.description = Some(description.to_string());
            RefOr::T(Schema::Object(object))
        }
        RefOr::T(Schema::OneOf(mut one_of)) => {
            one_of.description = Some(description.to_string());
            RefOr::T(Schema::OneOf(one_of))
        }
        RefOr::T(Schema::AnyOf(mut any_of)) => {
            any_of.description = Some(description.to_string());
            RefOr::T(Schema::AnyOf(any_of))
        }
        RefOr::T(Schema::AllOf(mut all_of)) => {
            all_of.description = Some(description.to_string());
            RefOr::T(Schema::AllOf(all_of))
        }
        other => other,
    }
}
