//! `calculator`: exact arithmetic. Numbers are rationals, so `0.1 + 0.2` is `0.3` and
//! `1 / 3` is `1/3`, never a rounded float.

use async_trait::async_trait;
use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::{One, Signed, ToPrimitive, Zero};
use serde_json::{Value, json};

use crate::tools::{ToolContext, ToolHandler, ToolOptions, ToolOutput, ToolResult};

const MAX_EXPRESSION_LEN: usize = 2000;
/// Larger exponents would let one call burn the CPU.
const MAX_EXPONENT: i64 = 10_000;
/// Digits shown for a value that has no finite decimal form.
const APPROXIMATION_DIGITS: usize = 20;

pub struct Calculator;

#[async_trait]
impl ToolHandler for Calculator {
    fn name(&self) -> &str {
        "calculator"
    }

    fn description(&self) -> &str {
        "Evaluates an arithmetic expression exactly: + - * / % ^, parentheses and decimals."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "expression": {"type": "string", "description": "For example '(1.5 + 2) * 3 ^ 2 / 7'."}
            },
            "required": ["expression"],
            "additionalProperties": false
        })
    }

    fn options(&self) -> ToolOptions {
        ToolOptions {
            read_only: true,
            ..ToolOptions::default()
        }
    }

    async fn call(&self, _: ToolContext, arguments: Value, _: ToolOutput) -> ToolResult {
        let expression = arguments
            .get("expression")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match evaluate(expression) {
            Ok(value) => {
                let exact = exact_text(&value);
                let decimal = decimal_text(&value);
                let text = if exact == decimal {
                    exact.clone()
                } else {
                    format!("{exact} (≈ {decimal})")
                };
                ToolResult::ok_with_data(text, json!({"exact": exact, "decimal": decimal}))
            }
            Err(message) => ToolResult::error(message),
        }
    }
}

/// Evaluates an expression or says precisely what is wrong with it.
pub fn evaluate(expression: &str) -> Result<BigRational, String> {
    if expression.len() > MAX_EXPRESSION_LEN {
        return Err(format!(
            "The expression is longer than {MAX_EXPRESSION_LEN} characters."
        ));
    }
    let mut parser = Parser {
        chars: expression.chars().collect(),
        at: 0,
    };
    parser.skip_spaces();
    if parser.at == parser.chars.len() {
        return Err("The expression is empty.".into());
    }
    let value = parser.expression()?;
    parser.skip_spaces();
    if let Some(c) = parser.peek() {
        return Err(format!(
            "Unexpected '{c}' at position {} of the expression.",
            parser.at + 1
        ));
    }
    Ok(value)
}

struct Parser {
    chars: Vec<char>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn skip_spaces(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.at += 1;
        }
    }

    /// Consumes `c` (after spaces) if it is next.
    fn eat(&mut self, c: char) -> bool {
        self.skip_spaces();
        if self.peek() == Some(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    // expression := term (('+' | '-') term)*
    fn expression(&mut self) -> Result<BigRational, String> {
        let mut value = self.term()?;
        loop {
            if self.eat('+') {
                value += self.term()?;
            } else if self.eat('-') {
                value -= self.term()?;
            } else {
                return Ok(value);
            }
        }
    }

    // term := unary (('*' | '/' | '%') unary)*
    fn term(&mut self) -> Result<BigRational, String> {
        let mut value = self.unary()?;
        loop {
            if self.eat('*') {
                value *= self.unary()?;
            } else if self.eat('/') {
                let divisor = self.unary()?;
                if divisor.is_zero() {
                    return Err("Division by zero.".into());
                }
                value /= divisor;
            } else if self.eat('%') {
                let divisor = self.unary()?;
                if divisor.is_zero() {
                    return Err("Remainder of a division by zero.".into());
                }
                // Truncated remainder: the sign follows the dividend, as in most languages.
                let quotient = (&value / &divisor).trunc();
                value -= divisor * quotient;
            } else {
                return Ok(value);
            }
        }
    }

    // unary := ('-' | '+') unary | power      (so -2^2 = -(2^2))
    fn unary(&mut self) -> Result<BigRational, String> {
        if self.eat('-') {
            return Ok(-self.unary()?);
        }
        if self.eat('+') {
            return self.unary();
        }
        self.power()
    }

    // power := atom ('^' unary)?              (right-associative)
    fn power(&mut self) -> Result<BigRational, String> {
        let base = self.atom()?;
        if !self.eat('^') {
            return Ok(base);
        }
        let exponent = self.unary()?;
        if !exponent.is_integer() {
            return Err("Only whole-number exponents can be computed exactly.".into());
        }
        let Some(n) = exponent
            .to_integer()
            .to_i64()
            .filter(|n| n.abs() <= MAX_EXPONENT)
        else {
            return Err(format!("Exponents are limited to ±{MAX_EXPONENT}."));
        };
        if n < 0 && base.is_zero() {
            return Err("Division by zero (zero to a negative power).".into());
        }
        let magnitude = pow(&base, n.unsigned_abs());
        Ok(if n < 0 { magnitude.recip() } else { magnitude })
    }

    // atom := number | '(' expression ')'
    fn atom(&mut self) -> Result<BigRational, String> {
        self.skip_spaces();
        match self.peek() {
            Some('(') => {
                self.at += 1;
                let value = self.expression()?;
                if !self.eat(')') {
                    return Err(format!("Missing ')' at position {}.", self.at + 1));
                }
                Ok(value)
            }
            Some(c) if c.is_ascii_digit() || c == '.' => self.number(),
            Some(c) => Err(format!(
                "Unexpected '{c}' at position {} of the expression.",
                self.at + 1
            )),
            None => Err("The expression ends too early.".into()),
        }
    }

    fn number(&mut self) -> Result<BigRational, String> {
        let start = self.at;
        let mut digits = String::new();
        let mut decimals = 0usize;
        let mut seen_point = false;
        while let Some(c) = self.peek() {
            if c.is_ascii_digit() {
                digits.push(c);
                if seen_point {
                    decimals += 1;
                }
            } else if c == '.' && !seen_point {
                seen_point = true;
            } else {
                break;
            }
            self.at += 1;
        }
        if digits.is_empty() {
            return Err(format!("Malformed number at position {}.", start + 1));
        }
        let numerator: BigInt = digits
            .parse()
            .map_err(|_| format!("Malformed number at position {}.", start + 1))?;
        let denominator = pow_int(10, decimals);
        Ok(BigRational::new(numerator, denominator))
    }
}

fn pow(base: &BigRational, exponent: u64) -> BigRational {
    let mut result = BigRational::one();
    let mut square = base.clone();
    let mut n = exponent;
    while n > 0 {
        if n & 1 == 1 {
            result *= &square;
        }
        square = &square * &square;
        n >>= 1;
    }
    result
}

fn pow_int(base: u32, exponent: usize) -> BigInt {
    let mut result = BigInt::one();
    for _ in 0..exponent {
        result *= base;
    }
    result
}

/// `7`, `-3/4`: the exact value.
fn exact_text(value: &BigRational) -> String {
    if value.is_integer() {
        value.to_integer().to_string()
    } else {
        let decimal = finite_decimal(value);
        decimal.unwrap_or_else(|| format!("{}/{}", value.numer(), value.denom()))
    }
}

/// The decimal form when it is finite (the denominator has only factors 2 and 5).
fn finite_decimal(value: &BigRational) -> Option<String> {
    let mut denominator = value.denom().clone();
    let mut places = 0usize;
    for factor in [2u32, 5] {
        let factor = BigInt::from(factor);
        while (&denominator % &factor).is_zero() {
            denominator /= &factor;
            places += 1;
        }
    }
    if !denominator.is_one() {
        return None;
    }
    Some(decimal_digits(value, places))
}

/// A decimal rendering: exact when finite, else rounded to [`APPROXIMATION_DIGITS`] places.
fn decimal_text(value: &BigRational) -> String {
    finite_decimal(value).unwrap_or_else(|| decimal_digits(value, APPROXIMATION_DIGITS))
}

fn decimal_digits(value: &BigRational, places: usize) -> String {
    let scale = pow_int(10, places);
    let scaled = (value.abs() * BigRational::from_integer(scale.clone()))
        .round()
        .to_integer();
    let integer = &scaled / &scale;
    let fraction = (&scaled % &scale).to_string();
    let sign = if value.is_negative() && !scaled.is_zero() {
        "-"
    } else {
        ""
    };
    if places == 0 {
        return format!("{sign}{integer}");
    }
    let fraction = format!("{fraction:0>places$}");
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() {
        format!("{sign}{integer}")
    } else {
        format!("{sign}{integer}.{fraction}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(expression: &str) -> String {
        exact_text(&evaluate(expression).unwrap_or_else(|e| panic!("{expression}: {e}")))
    }

    #[test]
    fn arithmetic_is_exact() {
        assert_eq!(shown("0.1 + 0.2"), "0.3");
        assert_eq!(shown("1 / 3"), "1/3");
        assert_eq!(shown("2 ^ 100"), "1267650600228229401496703205376");
        assert_eq!(shown("(1.5 + 2) * 3 ^ 2 / 7"), "4.5");
        assert_eq!(shown("-2 ^ 2"), "-4");
        assert_eq!(shown("2 ^ 3 ^ 2"), "512");
        assert_eq!(shown("7 % 3"), "1");
        assert_eq!(shown("-7 % 3"), "-1");
        assert_eq!(shown("2 ^ -2"), "0.25");
        assert_eq!(shown(".5 * 4"), "2");
        assert_eq!(
            decimal_text(&evaluate("2/3").unwrap()),
            "0.66666666666666666667"
        );
    }

    #[test]
    fn mistakes_are_named() {
        let error = |e: &str| evaluate(e).unwrap_err();
        assert_eq!(error("1 / 0"), "Division by zero.");
        assert_eq!(error("1 / (2 - 2)"), "Division by zero.");
        assert_eq!(error("2 +"), "The expression ends too early.");
        assert_eq!(
            error("2 + x"),
            "Unexpected 'x' at position 5 of the expression."
        );
        assert_eq!(error("(1 + 2"), "Missing ')' at position 7.");
        assert_eq!(
            error("2 ^ 0.5"),
            "Only whole-number exponents can be computed exactly."
        );
        assert_eq!(error("2 ^ 100000"), "Exponents are limited to ±10000.");
        assert_eq!(error(""), "The expression is empty.");
        assert_eq!(
            error("1 2"),
            "Unexpected '2' at position 3 of the expression."
        );
    }
}
