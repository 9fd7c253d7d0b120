//! The record kinds an `api:` value holds, field order per schema:
//! products, users, orders and ads.

use super::*;

// Field order in the builders below is the schema's: identity first, then
// status fields, then the rest. Small objects keep a prefix of it (plus
// whatever later small field still fits), as small records of a real type
// are the same record with fewer optional fields.

pub(super) fn product(o: &mut Obj<'_>, c: &Corpus, rng: &mut SmallRng, ctx: &Ctx, id: u64, time: u64) {
    let brand = brand_name(c, rng, ctx.brand);
    let name = if rng.random_bool(0.7) {
        format!("{} {} {}", c.product_adjectives.get(rng), c.materials.get(rng), c.product_nouns.get(rng))
    } else {
        format!("{} {}", c.product_adjectives.get(rng), c.product_nouns.get(rng))
    };
    let category = ctx.category.unwrap_or_else(|| c.categories.index(rng));
    let price = price_cents(rng);
    let cur = ctx.currency.unwrap_or_else(|| currency(c, rng, None));
    let stock = if rng.random_bool(0.15) { 0 } else { 10f64.powf(rng.random_range(0.0..3.0)) as u64 };
    o.maybe(rng, 0.7, |out, _| {
        key(out, "sku");
        sku(out, &brand, id);
    });
    o.field(rng, |out, _| kv_str(out, "name", &name));
    o.maybe(rng, 0.5, |out, _| {
        key(out, "slug");
        out.push(b'"');
        slug(out, &name, b'-');
        out.push(b'"');
    });
    o.maybe(rng, 0.8, |out, rng| kv_str(out, "status", c.product_statuses.get(rng)));
    o.field(rng, |out, _| kv_decimal(out, "price", price, 2));
    o.maybe(rng, 0.9, |out, _| kv_str(out, "currency", cur));
    o.maybe(rng, 0.8, |out, _| kv_bool(out, "in_stock", stock > 0));
    o.maybe(rng, 0.7, |out, _| kv_str(out, "category", &c.categories.items[category]));
    o.maybe(rng, 0.7, |out, _| kv_str(out, "brand", &brand));
    o.maybe(rng, 0.8, |out, _| kv_time(out, "created_at", time, None));
    o.maybe(rng, 0.6, |out, rng| kv_bool(out, "featured", rng.random_bool(0.1)));
    let rating = 50 - (rng.random_range(0.0f64..1.0).powi(2) * 25.0) as u64;
    o.maybe(rng, 0.6, |out, _| kv_decimal(out, "rating", rating, 1));
    let reviews = 10f64.powf(rng.random_range(0.0..4.0)) as u64;
    o.maybe(rng, 0.6, |out, _| kv_num(out, "reviews", reviews));
    o.maybe(rng, 0.7, |out, _| kv_num(out, "stock", stock));
    o.maybe(rng, 0.4, |out, rng| kv_bool(out, "digital", rng.random_bool(0.05)));
    let tags = rng.random_range(1..=4);
    o.maybe(rng, 0.6, |out, rng| {
        key(out, "tags");
        out.push(b'[');
        for i in 0..tags {
            if i > 0 {
                out.push(b',');
            }
            quoted(out, c.tags.get(rng));
        }
        out.push(b']');
    });
    o.maybe(rng, 0.5, |out, _| {
        key(out, "url");
        out.extend_from_slice(b"\"https://shop.example.com/products/");
        slug(out, &name, b'-');
        out.push(b'-');
        num(out, id);
        out.push(b'"');
    });
    o.maybe(rng, 0.5, |out, rng| {
        key(out, "image");
        out.extend_from_slice(b"\"https://cdn.example.com/images/");
        hex(out, rng, 16);
        out.extend_from_slice(b".jpg\"");
    });
    o.maybe(rng, 0.4, |out, rng| {
        key(out, "seller");
        out.push(b'{');
        kv_num(out, "id", rng.random_range(1_000..500_000));
        out.push(b',');
        kv_str(out, "name", &brand_name(c, rng, None));
        out.push(b',');
        kv_decimal(out, "rating", 50 - rng.random_range(0..15), 1);
        out.push(b'}');
    });
    o.maybe(rng, 0.3, |out, rng| {
        key(out, "dimensions");
        out.push(b'{');
        kv_decimal(out, "width", rng.random_range(10..1200), 1);
        out.push(b',');
        kv_decimal(out, "height", rng.random_range(10..1200), 1);
        out.push(b',');
        kv_decimal(out, "depth", rng.random_range(5..600), 1);
        out.extend_from_slice(br#","unit":"cm"}"#);
    });
    o.maybe(rng, 0.3, |out, rng| {
        key(out, "metadata");
        out.push(b'{');
        kv_str(out, "source", c.record_sources.get(rng));
        out.push(b',');
        kv_num(out, "version", [1, 1, 1, 2, 2, 3][rng.random_range(0..6)]);
        out.push(b'}');
    });
    o.maybe(rng, 0.4, |out, _| kv_null(out, "deleted_at"));
    let updated = (time + rng.random_range(0..400 * 86_400)).min(EPOCH_HI);
    o.maybe(rng, 0.6, |out, _| kv_time(out, "updated_at", updated, None));
}

pub(super) fn user(o: &mut Obj<'_>, c: &Corpus, rng: &mut SmallRng, ctx: &Ctx, time: u64) {
    let first = c.first_names.get(rng);
    let last = c.last_names.get(rng);
    let mut handle = Vec::new();
    match rng.random_range(0..4) {
        0 => {
            slug(&mut handle, first, b'.');
            handle.push(b'.');
            slug(&mut handle, last, b'.');
        }
        1 => {
            slug(&mut handle, &first[..first.chars().next().map_or(0, char::len_utf8)], b'_');
            slug(&mut handle, last, b'_');
            num(&mut handle, rng.random_range(1..100));
        }
        2 => {
            slug(&mut handle, first, b'_');
            handle.push(b'_');
            slug(&mut handle, last, b'_');
        }
        _ => {
            slug(&mut handle, first, b'_');
            num(&mut handle, rng.random_range(1..10_000));
        }
    }
    let handle = String::from_utf8_lossy(&handle).into_owned();
    let city = c.cities.index(rng);
    let country = ctx.country.unwrap_or(c.city_country[city]);
    o.maybe(rng, 0.9, |out, _| kv_str(out, "username", &handle));
    o.maybe(rng, 0.9, |out, _| {
        key(out, "name");
        out.push(b'"');
        out.extend_from_slice(first.as_bytes());
        out.push(b' ');
        out.extend_from_slice(last.as_bytes());
        out.push(b'"');
    });
    o.maybe(rng, 0.9, |out, rng| {
        key(out, "email");
        out.push(b'"');
        out.extend_from_slice(handle.as_bytes());
        out.push(b'@');
        out.extend_from_slice(c.email_domains.get(rng).as_bytes());
        out.push(b'"');
    });
    o.maybe(rng, 0.8, |out, rng| kv_bool(out, "active", rng.random_bool(0.95)));
    o.maybe(rng, 0.7, |out, rng| kv_str(out, "role", c.roles.get(rng)));
    o.maybe(rng, 0.7, |out, rng| kv_bool(out, "verified", rng.random_bool(0.7)));
    o.maybe(rng, 0.9, |out, _| kv_time(out, "created_at", time, None));
    o.maybe(rng, 0.7, |out, _| kv_str(out, "locale", v::COUNTRIES[country].1));
    o.maybe(rng, 0.5, |out, _| kv_str(out, "timezone", v::COUNTRIES[country].3));
    o.maybe(rng, 0.5, |out, rng| kv_str(out, "plan", c.plans.get(rng)));
    o.maybe(rng, 0.3, |out, rng| {
        key(out, "uuid");
        out.push(b'"');
        uuid(out, rng);
        out.push(b'"');
    });
    o.maybe(rng, 0.4, |out, rng| {
        key(out, "avatar_url");
        out.extend_from_slice(b"\"https://cdn.example.com/avatars/");
        hex(out, rng, 12);
        out.extend_from_slice(b".png\"");
    });
    o.maybe(rng, 0.4, |out, rng| {
        key(out, "preferences");
        out.push(b'{');
        kv_bool(out, "newsletter", rng.random_bool(0.3));
        out.push(b',');
        kv_str(out, "theme", c.themes.get(rng));
        out.push(b',');
        kv_bool(out, "notifications", rng.random_bool(0.8));
        out.push(b'}');
    });
    o.maybe(rng, 0.4, |out, rng| {
        key(out, "address");
        out.push(b'{');
        key(out, "street");
        out.push(b'"');
        num(out, rng.random_range(1..3000));
        out.push(b' ');
        out.extend_from_slice(c.streets.get(rng).as_bytes());
        out.push(b' ');
        out.extend_from_slice(c.street_kinds.get(rng).as_bytes());
        out.extend_from_slice(b"\",");
        kv_str(out, "city", &c.cities.items[city]);
        out.push(b',');
        key(out, "postal_code");
        out.push(b'"');
        num(out, rng.random_range(10_000..99_999));
        out.extend_from_slice(b"\",");
        kv_str(out, "country", v::COUNTRIES[country].0);
        out.push(b'}');
    });
    o.maybe(rng, 0.4, |out, rng| {
        key(out, "stats");
        out.push(b'{');
        kv_num(out, "followers", 10f64.powf(rng.random_range(0.0..4.5)) as u64);
        out.push(b',');
        kv_num(out, "following", 10f64.powf(rng.random_range(0.0..3.0)) as u64);
        out.push(b',');
        kv_num(out, "posts", 10f64.powf(rng.random_range(0.0..3.0)) as u64);
        out.push(b'}');
    });
    let login = (time + rng.random_range(0..600 * 86_400)).min(EPOCH_HI);
    o.maybe(rng, 0.6, |out, _| kv_time(out, "last_login_at", login, None));
    o.maybe(rng, 0.3, |out, _| kv_null(out, "deleted_at"));
}

pub(super) fn order(o: &mut Obj<'_>, c: &Corpus, rng: &mut SmallRng, ctx: &Ctx, id: u64, time: u64) {
    let status = ctx.status.map_or_else(|| c.order_statuses.index(rng), usize::from);
    let status = &*c.order_statuses.items[status];
    let lines: Vec<(u64, u64)> =
        (0..rng.random_range(1..=3)).map(|_| (rng.random_range(1..=3), price_cents(rng) / 4 + 99)).collect();
    let total: u64 = lines.iter().map(|(q, p)| q * p).sum();
    let cur = currency(c, rng, ctx.country);
    let customer = ctx.customer.unwrap_or_else(|| rng.random_range(1_000..5_000_000));
    // Order numbers embed the id, as many shops' do.
    o.maybe(rng, 0.8, |out, _| {
        key(out, "number");
        out.extend_from_slice(b"\"ORD-");
        num(out, civil_from_days(time / 86_400).0);
        out.push(b'-');
        num(out, id);
        out.push(b'"');
    });
    o.field(rng, |out, _| kv_str(out, "status", status));
    o.maybe(rng, 0.9, |out, _| kv_num(out, "customer_id", customer));
    o.maybe(rng, 0.7, |out, _| kv_bool(out, "paid", !matches!(status, "pending" | "cancelled")));
    o.maybe(rng, 0.9, |out, _| kv_str(out, "currency", cur));
    o.field(rng, |out, _| kv_decimal(out, "total", total, 2));
    o.maybe(rng, 0.6, |out, rng| kv_bool(out, "gift", rng.random_bool(0.08)));
    o.maybe(rng, 0.6, |out, rng| kv_str(out, "source", c.order_sources.get(rng)));
    let ms = Some(rng.random_range(0..1000));
    o.field(rng, |out, _| kv_time(out, "created_at", time, ms));
    o.maybe(rng, 0.5, |out, rng| kv_str(out, "fulfillment", c.fulfillment.get(rng)));
    let discount = if rng.random_bool(0.8) { 0 } else { total / [10, 5, 4][rng.random_range(0..3)] };
    o.maybe(rng, 0.5, |out, _| kv_decimal(out, "discount", discount, 2));
    o.maybe(rng, 0.6, |out, rng| {
        key(out, "items");
        out.push(b'[');
        for (i, (qty, price)) in lines.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.push(b'{');
            key(out, "sku");
            sku(out, &brand_name(c, rng, None), rng.random_range(0..100_000));
            out.push(b',');
            kv_num(out, "qty", *qty);
            out.push(b',');
            kv_decimal(out, "price", *price, 2);
            out.push(b'}');
        }
        out.push(b']');
    });
    o.maybe(rng, 0.5, |out, rng| {
        let city = c.cities.index(rng);
        key(out, "shipping");
        out.push(b'{');
        kv_str(out, "city", &c.cities.items[city]);
        out.push(b',');
        kv_str(out, "country", v::COUNTRIES[ctx.country.unwrap_or(c.city_country[city])].0);
        out.push(b',');
        kv_str(out, "carrier", c.carriers.get(rng));
        out.push(b',');
        key(out, "tracking");
        out.extend_from_slice(b"\"1Z");
        let at = out.len();
        hex(out, rng, 14);
        out[at..].make_ascii_uppercase();
        out.extend_from_slice(b"\"}");
    });
    o.maybe(rng, 0.5, |out, rng| {
        key(out, "payment");
        out.push(b'{');
        let method = c.payment_methods.get(rng);
        kv_str(out, "method", method);
        if method == "card" {
            out.push(b',');
            kv_str(out, "brand", c.card_brands.get(rng));
            out.push(b',');
            key(out, "last4");
            out.push(b'"');
            for _ in 0..4 {
                out.push(b'0' + rng.random_range(0..10u8));
            }
            out.push(b'"');
        }
        out.push(b'}');
    });
    let updated = time + rng.random_range(60..20 * 86_400);
    o.maybe(rng, 0.6, |out, rng| kv_time(out, "updated_at", updated, Some(rng.random_range(0..1000))));
}

pub(super) fn ad(o: &mut Obj<'_>, c: &Corpus, rng: &mut SmallRng, ctx: &Ctx, time: u64) {
    let (campaign, advertiser, h, t) = ctx.campaign.unwrap_or_else(|| {
        (
            rng.random_range(10_000..900_000),
            rng.random_range(1_000..90_000),
            c.brand_heads.index(rng),
            c.brand_tails.index(rng),
        )
    });
    let brand = format!("{}{}", c.brand_heads.items[h], c.brand_tails.items[t]);
    let status = ctx.status.map_or_else(|| c.ad_statuses.index(rng), usize::from);
    o.maybe(rng, 0.9, |out, _| kv_num(out, "campaign_id", campaign));
    o.maybe(rng, 0.9, |out, _| kv_str(out, "status", &c.ad_statuses.items[status]));
    o.maybe(rng, 0.6, |out, rng| kv_bool(out, "approved", rng.random_bool(0.9)));
    o.maybe(rng, 0.7, |out, rng| kv_str(out, "format", c.ad_formats.get(rng)));
    o.maybe(rng, 0.9, |out, rng| {
        key(out, "title");
        out.push(b'"');
        let at = out.len();
        for (i, w) in
            [c.adjectives.get(rng), c.nouns.get(rng), c.prepositions.get(rng), c.nouns.get(rng)].into_iter().enumerate()
        {
            if i > 0 {
                out.push(b' ');
            }
            out.extend_from_slice(w.as_bytes());
        }
        out[at].make_ascii_uppercase();
        out.push(b'"');
    });
    o.maybe(rng, 0.7, |out, rng| kv_str(out, "cta", c.calls_to_action.get(rng)));
    o.maybe(rng, 0.8, |out, _| kv_time(out, "start_at", time, None));
    o.maybe(rng, 0.7, |out, rng| kv_decimal(out, "bid", rng.random_range(5..2500), 3));
    o.maybe(rng, 0.6, |out, rng| {
        key(out, "advertiser");
        out.push(b'{');
        kv_num(out, "id", advertiser);
        out.push(b',');
        key(out, "name");
        out.push(b'"');
        out.extend_from_slice(brand.as_bytes());
        out.push(b' ');
        out.extend_from_slice(c.company_suffixes.get(rng).as_bytes());
        out.extend_from_slice(b"\"}");
    });
    o.maybe(rng, 0.6, |out, rng| {
        key(out, "url");
        out.extend_from_slice(b"\"https://www.");
        slug(out, &brand, b'-');
        out.extend_from_slice(b".com/");
        slug(out, c.nouns.get(rng), b'-');
        out.extend_from_slice(b"?utm_source=");
        out.extend_from_slice(c.utm_sources.get(rng).as_bytes());
        out.extend_from_slice(b"&utm_campaign=");
        num(out, campaign);
        out.push(b'"');
    });
    o.maybe(rng, 0.5, |out, rng| kv_decimal(out, "ctr", rng.random_range(1..800), 4));
    o.maybe(rng, 0.5, |out, rng| kv_num(out, "impressions", 10f64.powf(rng.random_range(2.0..6.5)) as u64));
    o.maybe(rng, 0.5, |out, rng| {
        key(out, "budget");
        out.push(b'{');
        kv_num(out, "daily", [10, 20, 25, 50, 100, 250, 500, 1000][rng.random_range(0..8)]);
        out.push(b',');
        kv_str(out, "currency", currency(c, rng, None));
        out.push(b',');
        kv_str(out, "pacing", c.pacing.get(rng));
        out.push(b'}');
    });
    o.maybe(rng, 0.4, |out, rng| {
        key(out, "targeting");
        out.extend_from_slice(b"{\"countries\":[");
        for i in 0..rng.random_range(1..=3) {
            if i > 0 {
                out.push(b',');
            }
            quoted(out, c.countries.get(rng));
        }
        out.extend_from_slice(b"],\"devices\":[");
        quoted(out, c.devices.get(rng));
        out.extend_from_slice(b"],");
        let age = [18, 25, 35, 45][rng.random_range(0..4)];
        kv_num(out, "age_min", age);
        out.push(b',');
        kv_num(out, "age_max", age + [9, 19, 40][rng.random_range(0..3)]);
        out.push(b',');
        kv_str(out, "placement", c.placements.get(rng));
        out.push(b'}');
    });
    let end = time + 86_400 * [7, 14, 30, 90][rng.random_range(0..4)];
    o.maybe(rng, 0.6, |out, _| kv_time(out, "end_at", end, None));
}
