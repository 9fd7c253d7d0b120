//! Realistic JSON values: `api:` objects shaped like API responses
//! (products, users, orders, ads) and `page:` documents holding about ten
//! of them, for measuring compression on data that compresses like the real
//! thing.
//!
//! Each value is a pure function of (workload seed, key index, size range),
//! different for every key, so a trained dictionary can only learn what it
//! could learn from real data (field names, enums, frequent words, names,
//! stock phrases), not whole values. Sizes land exactly in the range by
//! choosing which optional fields to include and then how long the
//! free-text field is, ending it on a whole word; nothing is padded.
//!
//! What makes the ratios come out like real JSON's, measured by the test
//! `zstd_ratios_look_like_real_json`: field order fixed per kind (a few
//! schemas, not a random field mix per record); enums, booleans and nulls
//! beside the high-entropy ids, times and prices; derived fields (emails
//! from names, URLs and order numbers from ids); text from sentence shapes
//! over zipf-weighted word classes plus stock phrases and sentences, which
//! compresses like real English prose of the same length; and, in pages,
//! items that share a schema, a topic, a filter value and nearby ids and
//! times, with short summaries rather than long descriptions.

use std::sync::OnceLock;

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

use super::vocab as v;

mod json;
mod records;
mod text;

use json::*;
use records::*;
use text::*;

pub use crate::config::{API_MIN, PAGE_MIN};

/// Appends the `api:` value of key `index`: one object of a size drawn
/// uniformly from `lo..=hi` (raised to [`API_MIN`]).
pub fn api_value(out: &mut Vec<u8>, seed: u64, index: u64, lo: usize, hi: usize) {
    let mut rng = key_rng(seed, 0xa91_0b1e, index);
    let target = rng.random_range(lo.max(API_MIN)..=hi.max(API_MIN));
    let c = corpus();
    let mut ctx = Ctx::standalone(c, &mut rng);
    write_object(out, c, &mut rng, &mut ctx, target);
}

/// Bytes the second version's envelope adds at most (`{"v":2,"data":…}`).
pub const V2_ENVELOPE: usize = 15;

/// Appends key `index`'s `api:` object as a second version of the API
/// writes it (`api-change:`): the same record, its field names in
/// camelCase (`created_at` becomes `createdAt`), wrapped in an envelope
/// with a version field. Field names are what a dictionary learns first,
/// so one trained on the first version loses much of its grip.
pub fn api_v2_value(out: &mut Vec<u8>, seed: u64, index: u64, lo: usize, hi: usize) {
    let mut v1 = Vec::with_capacity(hi + 16);
    api_value(&mut v1, seed, index, lo, hi);
    out.extend_from_slice(b"{\"v\":2,\"data\":");
    // A quoted string followed by a colon is a field name: generated
    // strings hold no quotes, so no value is taken for one.
    let mut i = 0;
    while i < v1.len() {
        let b = v1[i];
        out.push(b);
        i += 1;
        if b != b'"' {
            continue;
        }
        let end = v1[i..].iter().position(|&c| c == b'"').map_or(v1.len(), |e| i + e);
        let name = v1.get(end + 1) == Some(&b':');
        let mut upper = false;
        for &c in &v1[i..end] {
            if name && c == b'_' {
                upper = true;
            } else {
                out.push(if upper { c.to_ascii_uppercase() } else { c });
                upper = false;
            }
        }
        out.extend_from_slice(&v1[end..(end + 1).min(v1.len())]);
        i = end + 1;
    }
    out.push(b'}');
}

/// Appends the `page:` value of key `index`: a listing page of objects of
/// one kind, of a size drawn uniformly from `lo..=hi` (raised to
/// [`PAGE_MIN`]).
pub fn page_value(out: &mut Vec<u8>, seed: u64, index: u64, lo: usize, hi: usize) {
    let mut rng = key_rng(seed, 0x9a9e_5eed, index);
    let target = rng.random_range(lo.max(PAGE_MIN)..=hi.max(PAGE_MIN));
    write_page(out, corpus(), &mut rng, target);
}

/// A generator per key: neighbouring indices must not give correlated
/// streams, so the index goes through a full 64-bit mix first.
fn key_rng(seed: u64, salt: u64, index: u64) -> SmallRng {
    SmallRng::seed_from_u64(mix(seed ^ mix(index ^ salt)))
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

// ---------------------------------------------------------------------------
// Objects

/// One JSON object being filled against a byte budget: a field that would
/// cross `limit` is taken back, so later, smaller fields can still fit.
struct Obj<'a> {
    out: &'a mut Vec<u8>,
    limit: usize,
    fields: usize,
    /// Decides which optional fields the object has; seeded per listing,
    /// so a page's items share one schema as a real endpoint's do.
    schema: SmallRng,
}

impl Obj<'_> {
    fn field(&mut self, rng: &mut SmallRng, write: impl FnOnce(&mut Vec<u8>, &mut SmallRng)) -> bool {
        let mark = self.out.len();
        if self.fields > 0 {
            self.out.push(b',');
        }
        write(self.out, rng);
        if self.out.len() > self.limit {
            self.out.truncate(mark);
            return false;
        }
        self.fields += 1;
        true
    }

    /// A field the schema has with probability `p` (written if it fits).
    fn maybe(&mut self, rng: &mut SmallRng, p: f64, write: impl FnOnce(&mut Vec<u8>, &mut SmallRng)) -> bool {
        self.schema.random_bool(p) && self.field(rng, write)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Product,
    User,
    Order,
    Ad,
}

/// Field sets per kind: a real cache holds the output of a few
/// serializers per record type, not a fresh field mix per record.
const SCHEMAS: u64 = 3;

/// 2019-01-01 to 2025-06-01: the span timestamps are drawn from.
const EPOCH_LO: u64 = 1_546_300_800;
const EPOCH_HI: u64 = 1_748_736_000;

/// What the objects of one page share. Items of a real listing are not
/// independent: ids and dates are close, and a filter (one category, one
/// customer's orders, one campaign's ads) fixes some fields, which is why
/// a page compresses better per object than a lone object.
struct Ctx {
    kind: Kind,
    /// Id of the next object; a listing counts down from it.
    id: u64,
    /// Creation time of the next object; a listing goes back in time.
    time: u64,
    /// How far apart consecutive objects' ids and times are.
    id_step: u64,
    time_step: u64,
    country: Option<usize>,
    category: Option<usize>,
    brand: Option<(usize, usize)>,
    customer: Option<u64>,
    campaign: Option<(u64, u64, usize, usize)>,
    currency: Option<&'static str>,
    /// Status all items share (a listing filtered by status), as an index
    /// into the kind's status list.
    status: Option<u8>,
    /// Seed of the optional-field choices.
    schema: u64,
    /// Share of an object's bytes at least left to its free text.
    text_share: f64,
    /// Bytes a listing's items give their fields, the same for all so that
    /// items of slightly different sizes still have the same fields.
    field_budget: Option<usize>,
    topic: Topic,
}

impl Ctx {
    fn standalone(c: &Corpus, rng: &mut SmallRng) -> Ctx {
        let kind = [Kind::Product, Kind::User, Kind::Order, Kind::Ad][rng.random_range(0..4)];
        Ctx {
            kind,
            id: rng.random_range(100_000..40_000_000),
            time: rng.random_range(EPOCH_LO..EPOCH_HI),
            id_step: 0,
            time_step: 0,
            country: None,
            category: None,
            brand: None,
            customer: None,
            campaign: None,
            currency: None,
            status: None,
            schema: mix((kind as u64) << 8 | rng.random_range(0..SCHEMAS)),
            text_share: rng.random_range(0.1..0.3),
            field_budget: None,
            topic: Topic::new(c, rng),
        }
    }

    fn listing(c: &Corpus, rng: &mut SmallRng) -> Ctx {
        let mut ctx = Ctx::standalone(c, rng);
        // Items of a listing carry a short summary at least; the page's
        // field budget decides the rest.
        ctx.text_share = 0.04;
        ctx.id_step = [3, 40, 800][rng.random_range(0..3)];
        ctx.time_step = [600, 3 * 3600, 2 * 86_400][rng.random_range(0..3)];
        match ctx.kind {
            Kind::Product => {
                ctx.category = rng.random_bool(0.7).then(|| c.categories.index(rng));
                ctx.brand = rng.random_bool(0.3).then(|| (c.brand_heads.index(rng), c.brand_tails.index(rng)));
                ctx.currency = Some(currency(c, rng, None));
            }
            Kind::User => ctx.country = rng.random_bool(0.6).then(|| c.countries.index(rng)),
            Kind::Order => {
                ctx.customer = rng.random_bool(0.5).then(|| rng.random_range(1_000..5_000_000));
                ctx.status = rng.random_bool(0.4).then(|| c.order_statuses.index(rng) as u8);
                ctx.country = Some(c.countries.index(rng));
            }
            Kind::Ad => {
                ctx.campaign = rng.random_bool(0.8).then(|| {
                    (
                        rng.random_range(10_000..900_000),
                        rng.random_range(1_000..90_000),
                        c.brand_heads.index(rng),
                        c.brand_tails.index(rng),
                    )
                });
                ctx.status = rng.random_bool(0.6).then(|| c.ad_statuses.index(rng) as u8);
            }
        }
        ctx
    }

    /// Advances to the next object of a listing; returns its id and time.
    fn next(&mut self, rng: &mut SmallRng) -> (u64, u64) {
        let out = (self.id, self.time);
        if self.id_step > 0 {
            self.id = self.id.saturating_sub(rng.random_range(1..=self.id_step)).max(1);
            self.time = self.time.saturating_sub(rng.random_range(0..=self.time_step)).max(EPOCH_LO);
        }
        out
    }
}

/// Prices in USD most of the time, as most catalogues are.
fn currency(c: &Corpus, rng: &mut SmallRng, country: Option<usize>) -> &'static str {
    match country {
        Some(i) => v::COUNTRIES[i].2,
        None if rng.random_bool(0.6) => "USD",
        None => v::COUNTRIES[c.countries.index(rng)].2,
    }
}

/// A price in cents, log-uniform from $3 to $2000 with retail endings.
fn price_cents(rng: &mut SmallRng) -> u64 {
    let dollars = 10f64.powf(rng.random_range(0.5..3.3)) as u64;
    let cents = [99, 95, 0, 49, 50][rng.random_range(0..5)];
    dollars * 100 + cents
}

/// Appends one object of exactly `target` bytes (at least [`API_MIN`]).
fn write_object(out: &mut Vec<u8>, c: &Corpus, rng: &mut SmallRng, ctx: &mut Ctx, target: usize) {
    let target = target.max(API_MIN);
    let start = out.len();
    let end = start + target;
    let text_key = match ctx.kind {
        Kind::Product => "description",
        Kind::User => "bio",
        Kind::Order => "note",
        Kind::Ad => "text",
    };
    // `,"key":""}`: what the text field costs beyond its text.
    let text_overhead = text_key.len() + 7;
    // Keep the text its share; the bound leaves `{"id":…` room in the
    // smallest objects.
    let min_text = ((target as f64 * ctx.text_share) as usize).min(target.saturating_sub(text_overhead + 26));
    let (id, time) = ctx.next(rng);
    out.push(b'{');
    kv_num(out, "id", id);
    let mut limit = end - text_overhead - min_text;
    if let Some(budget) = ctx.field_budget {
        limit = limit.min(start + budget);
    }
    let schema = SmallRng::seed_from_u64(ctx.schema);
    let mut obj = Obj { out, limit, fields: 1, schema };
    match ctx.kind {
        Kind::Product => product(&mut obj, c, rng, ctx, id, time),
        Kind::User => user(&mut obj, c, rng, ctx, time),
        Kind::Order => order(&mut obj, c, rng, ctx, id, time),
        Kind::Ad => ad(&mut obj, c, rng, ctx, time),
    }
    out.push(b',');
    key(out, text_key);
    out.push(b'"');
    let len = end - out.len() - 2;
    write_text(out, c, rng, ctx.kind, &ctx.topic, len);
    out.extend_from_slice(b"\"}");
}

fn brand_name(c: &Corpus, rng: &mut SmallRng, fixed: Option<(usize, usize)>) -> String {
    let (h, t) = fixed.unwrap_or_else(|| (c.brand_heads.index(rng), c.brand_tails.index(rng)));
    format!("{}{}", c.brand_heads.items[h], c.brand_tails.items[t])
}

/// A SKU from a brand and a number: `SI-09814`.
fn sku(out: &mut Vec<u8>, brand: &str, n: u64) {
    out.push(b'"');
    out.extend(brand.bytes().filter(u8::is_ascii_alphabetic).take(2).map(|b| b.to_ascii_uppercase()));
    out.push(b'-');
    let digits = itoa::Buffer::new().format(n % 100_000).len();
    out.resize(out.len() + 5 - digits, b'0');
    num(out, n % 100_000);
    out.push(b'"');
}

// ---------------------------------------------------------------------------
// Pages

/// Appends a listing page of exactly `target` bytes (at least
/// [`PAGE_MIN`]): `{"page":…,"per_page":…,"total":…,"items":[…]}` with
/// objects of about 175 bytes each, as many as the size allows (up to 100).
fn write_page(out: &mut Vec<u8>, c: &Corpus, rng: &mut SmallRng, target: usize) {
    const TYPICAL: usize = 175;
    let target = target.max(PAGE_MIN);
    let end = out.len() + target;
    let mut n = ((target.saturating_sub(50) + TYPICAL / 2) / TYPICAL).clamp(1, 100);
    let per_page = [5, 10, 20, 25, 50, 100].into_iter().find(|&p| p >= n as u64).unwrap_or(100);
    let page: u64 = if rng.random_bool(0.4) { 1 } else { rng.random_range(2..60) };
    // A short page is the last one.
    let total = if (n as u64) < per_page {
        (page - 1) * per_page + n as u64
    } else {
        page * per_page + rng.random_range(0..5000)
    };
    out.extend_from_slice(b"{\"page\":");
    num(out, page);
    out.extend_from_slice(b",\"per_page\":");
    num(out, per_page);
    out.extend_from_slice(b",\"total\":");
    num(out, total);
    out.extend_from_slice(b",\"items\":[");
    // `]}` and the commas between items.
    let mut budget = end.saturating_sub(out.len() + 2);
    n = n.min((budget + 1) / (API_MIN + 1)).max(1);
    budget -= n - 1;
    let mut ctx = Ctx::listing(c, rng);
    // Fields get 80-95% of an average item; the text takes the rest.
    let avg = budget / n;
    ctx.field_budget = Some(avg - avg * rng.random_range(5..=20) / 100);
    for i in 0..n {
        let left = n - i;
        let size = if left == 1 {
            budget
        } else {
            let avg = budget / left;
            let jitter = rng.random_range(avg * 9 / 10..=avg * 11 / 10);
            jitter.clamp(API_MIN, budget - (left - 1) * API_MIN)
        };
        if i > 0 {
            out.push(b',');
        }
        write_object(out, c, rng, &mut ctx, size);
        budget -= size;
    }
    out.extend_from_slice(b"]}");
}

#[cfg(test)]
mod tests;
