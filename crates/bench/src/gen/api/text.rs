//! Text for the JSON values: zipf-weighted word and name choice, the corpus
//! built from the vocabulary, sentence shapes, topics, and writing a
//! free-text field of an exact length ending on a whole word.

use super::*;

// ---------------------------------------------------------------------------
// Weighted choice

/// Zipf weights `1/(rank+1)^s` over `n` ranks, sampled in O(1) by the alias
/// method: a word is drawn per few bytes of text, so a binary search or a
/// `powf` per draw would dominate the cost of a value.
pub(super) struct Zipf {
    /// Threshold on a 32-bit draw to keep the column, else take `alias`.
    pub(super) keep: Box<[u32]>,
    pub(super) alias: Box<[u32]>,
}

impl Zipf {
    pub(super) fn new(n: usize, s: f64) -> Zipf {
        let n = n.max(1);
        let weights: Vec<f64> = (0..n).map(|r| 1.0 / ((r + 1) as f64).powf(s)).collect();
        let total: f64 = weights.iter().sum();
        let mut scaled: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
        let mut alias: Vec<u32> = (0..n as u32).collect();
        let (mut small, mut large): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| scaled[i] < 1.0);
        while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
            small.pop();
            alias[s] = l as u32;
            scaled[l] -= 1.0 - scaled[s];
            if scaled[l] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // Whatever is left is full up to rounding error.
        for i in small.into_iter().chain(large) {
            scaled[i] = 1.0;
        }
        let keep = scaled.iter().map(|&p| (p * 4_294_967_296.0).min(u32::MAX as f64) as u32).collect();
        Zipf { keep, alias: alias.into() }
    }

    pub(super) fn sample(&self, rng: &mut SmallRng) -> usize {
        let r = rng.next_u64();
        let col = (((r >> 32) * self.keep.len() as u64) >> 32) as usize;
        if (r as u32) < self.keep[col] {
            col
        } else {
            self.alias[col] as usize
        }
    }
}

/// A list drawn with zipf weights by position.
pub(super) struct Pick {
    pub(super) items: Box<[Box<str>]>,
    pub(super) zipf: Zipf,
}

impl Pick {
    pub(super) fn new<S: AsRef<str>>(items: impl IntoIterator<Item = S>, s: f64) -> Pick {
        let items: Box<[Box<str>]> = items.into_iter().map(|w| w.as_ref().into()).collect();
        let zipf = Zipf::new(items.len(), s);
        Pick { items, zipf }
    }

    pub(super) fn index(&self, rng: &mut SmallRng) -> usize {
        self.zipf.sample(rng)
    }

    pub(super) fn get(&self, rng: &mut SmallRng) -> &str {
        &self.items[self.zipf.sample(rng)]
    }
}

// ---------------------------------------------------------------------------
// Word lists, built once

pub(super) struct Corpus {
    pub(super) nouns: Pick,
    pub(super) plurals: Box<[Box<str>]>,
    pub(super) verbs: Pick,
    pub(super) verbs_s: Box<[Box<str>]>,
    pub(super) verbs_ing: Box<[Box<str>]>,
    pub(super) adjectives: Pick,
    pub(super) adverbs: Pick,
    pub(super) determiners: Pick,
    pub(super) determiners_plural: Pick,
    pub(super) prepositions: Pick,
    pub(super) conjunctions: Pick,
    pub(super) pronouns: Pick,
    pub(super) first_names: Pick,
    pub(super) last_names: Pick,
    pub(super) cities: Pick,
    /// Index into `v::COUNTRIES` of each city.
    pub(super) city_country: Box<[usize]>,
    pub(super) countries: Pick,
    pub(super) streets: Pick,
    pub(super) street_kinds: Pick,
    pub(super) email_domains: Pick,
    pub(super) brand_heads: Pick,
    pub(super) brand_tails: Pick,
    pub(super) company_suffixes: Pick,
    pub(super) product_adjectives: Pick,
    pub(super) materials: Pick,
    pub(super) product_nouns: Pick,
    pub(super) categories: Pick,
    pub(super) tags: Pick,
    pub(super) order_statuses: Pick,
    pub(super) carriers: Pick,
    pub(super) payment_methods: Pick,
    pub(super) card_brands: Pick,
    pub(super) roles: Pick,
    pub(super) plans: Pick,
    pub(super) ad_statuses: Pick,
    pub(super) ad_formats: Pick,
    pub(super) placements: Pick,
    pub(super) calls_to_action: Pick,
    pub(super) devices: Pick,
    pub(super) utm_sources: Pick,
    pub(super) phrases: Pick,
    pub(super) product_statuses: Pick,
    pub(super) record_sources: Pick,
    pub(super) order_sources: Pick,
    pub(super) fulfillment: Pick,
    pub(super) themes: Pick,
    pub(super) pacing: Pick,
    /// Stock sentences by [`Kind`].
    pub(super) stock: [Pick; 4],
    /// Nouns by length, to end a text exactly on its size.
    pub(super) by_len: Box<[Box<[Box<str>]>]>,
}

impl Corpus {
    /// A noun of exactly `len` bytes (`3..=MAX_FILL`), commoner ones
    /// likelier.
    pub(super) fn filler(&self, rng: &mut SmallRng, len: usize) -> &str {
        match self.by_len.get(len) {
            Some(list) if !list.is_empty() => {
                let i = rng.random_range(0..list.len()).min(rng.random_range(0..list.len()));
                &list[i]
            }
            _ => "a",
        }
    }
}

pub(super) fn corpus() -> &'static Corpus {
    static CORPUS: OnceLock<Corpus> = OnceLock::new();
    CORPUS.get_or_init(Corpus::new)
}

/// Skew of word choice within a word class. Natural-language word
/// frequencies follow zipf with an exponent near 1.
pub(super) const WORD_SKEW: f64 = 1.0;
/// Skew of names, places and enum values: real columns are skewed too,
/// a little less steeply than words.
pub(super) const NAME_SKEW: f64 = 0.8;

impl Corpus {
    pub(super) fn new() -> Corpus {
        let nouns: Vec<&str> = v::NOUNS.split_ascii_whitespace().collect();
        let verbs: Vec<&str> = v::VERBS.split_ascii_whitespace().collect();
        let city_country = v::CITIES
            .iter()
            .map(|(_, cc)| v::COUNTRIES.iter().position(|(code, ..)| code == cc).unwrap_or(0))
            .collect();
        let p = |list: &[&str], s: f64| Pick::new(list.iter(), s);
        let mut by_len: Vec<Vec<Box<str>>> = vec![Vec::new(); MAX_FILL + 1];
        let plurals: Vec<String> = nouns.iter().map(|n| suffix_s(n)).collect();
        for w in nouns.iter().copied().chain(plurals.iter().map(String::as_str)) {
            if let Some(list) = by_len.get_mut(w.len()) {
                list.push(w.into());
            }
        }
        Corpus {
            by_len: by_len.into_iter().map(Vec::into_boxed_slice).collect(),
            plurals: plurals.iter().map(|n| n.as_str().into()).collect(),
            nouns: Pick::new(nouns.iter(), WORD_SKEW),
            verbs_s: verbs.iter().map(|w| suffix_s(w).into()).collect(),
            verbs_ing: verbs.iter().map(|w| suffix_ing(w).into()).collect(),
            verbs: Pick::new(verbs.iter(), WORD_SKEW),
            adjectives: Pick::new(v::ADJECTIVES.split_ascii_whitespace(), WORD_SKEW),
            adverbs: Pick::new(v::ADVERBS.split_ascii_whitespace(), WORD_SKEW),
            determiners: p(v::DETERMINERS, WORD_SKEW),
            determiners_plural: p(v::DETERMINERS_PLURAL, WORD_SKEW),
            prepositions: p(v::PREPOSITIONS, WORD_SKEW),
            conjunctions: p(v::CONJUNCTIONS, WORD_SKEW),
            pronouns: p(v::PRONOUNS, WORD_SKEW),
            first_names: p(v::FIRST_NAMES, NAME_SKEW),
            last_names: p(v::LAST_NAMES, NAME_SKEW),
            cities: Pick::new(v::CITIES.iter().map(|(c, _)| c), NAME_SKEW),
            city_country,
            countries: Pick::new(v::COUNTRIES.iter().map(|(c, ..)| c), 1.2),
            streets: p(v::STREET_NAMES, NAME_SKEW),
            street_kinds: p(v::STREET_KINDS, 1.2),
            email_domains: p(v::EMAIL_DOMAINS, 1.3),
            brand_heads: p(v::BRAND_HEADS, NAME_SKEW),
            brand_tails: p(v::BRAND_TAILS, NAME_SKEW),
            company_suffixes: p(v::COMPANY_SUFFIXES, 1.2),
            product_adjectives: p(v::PRODUCT_ADJECTIVES, NAME_SKEW),
            materials: p(v::MATERIALS, NAME_SKEW),
            product_nouns: p(v::PRODUCT_NOUNS, NAME_SKEW),
            categories: p(v::CATEGORIES, NAME_SKEW),
            tags: p(v::TAGS, WORD_SKEW),
            order_statuses: p(v::ORDER_STATUSES, 1.3),
            carriers: p(v::CARRIERS, 1.0),
            payment_methods: p(v::PAYMENT_METHODS, 1.3),
            card_brands: p(v::CARD_BRANDS, 1.3),
            roles: p(v::ROLES, 1.5),
            plans: p(v::PLANS, 1.2),
            ad_statuses: p(v::AD_STATUSES, 1.3),
            ad_formats: p(v::AD_FORMATS, 1.0),
            placements: p(v::AD_PLACEMENTS, 1.0),
            calls_to_action: p(v::CALLS_TO_ACTION, 1.0),
            devices: p(v::DEVICES, 1.0),
            utm_sources: p(v::UTM_SOURCES, 1.0),
            phrases: p(v::PHRASES, WORD_SKEW),
            product_statuses: p(v::PRODUCT_STATUSES, 2.5),
            record_sources: p(v::RECORD_SOURCES, 1.2),
            order_sources: p(v::ORDER_SOURCES, 1.2),
            fulfillment: p(v::FULFILLMENT, 1.5),
            themes: p(v::THEMES, 1.2),
            pacing: p(v::PACING, 2.0),
            stock: [v::STOCK_PRODUCT, v::STOCK_USER, v::STOCK_ORDER, v::STOCK_AD].map(|l| p(l, WORD_SKEW)),
        }
    }
}

/// Plural of a regular noun, or third person of a regular verb; the lists
/// hold no word that needs an irregular form.
pub(super) fn suffix_s(w: &str) -> String {
    let b = w.as_bytes();
    let consonant_y = b.len() > 1 && w.ends_with('y') && !is_vowel(b[b.len() - 2]);
    if consonant_y {
        format!("{}ies", &w[..w.len() - 1])
    } else if ["s", "x", "z", "ch", "sh"].iter().any(|e| w.ends_with(e)) {
        format!("{w}es")
    } else {
        format!("{w}s")
    }
}

/// `-ing` form of a regular verb (US spelling: no doubling in `travel`).
pub(super) fn suffix_ing(w: &str) -> String {
    let b = w.as_bytes();
    let n = b.len();
    if w.ends_with("ie") {
        return format!("{}ying", &w[..n - 2]);
    }
    if n > 2 && w.ends_with('e') && !w.ends_with("ee") {
        return format!("{}ing", &w[..n - 1]);
    }
    // One syllable ending consonant-vowel-consonant doubles (`run`,
    // `plan`); so do the few stressed-last-syllable verbs in the list.
    let syllables = b.windows(2).filter(|p| !is_vowel(p[0]) && is_vowel(p[1])).count() + usize::from(is_vowel(b[0]));
    let cvc = n >= 3 && !is_vowel(b[n - 3]) && is_vowel(b[n - 2]) && !is_vowel(b[n - 1]) && !b"wxy".contains(&b[n - 1]);
    if cvc && (syllables == 1 || matches!(w, "begin" | "prefer")) {
        return format!("{w}{}ing", b[n - 1] as char);
    }
    format!("{w}ing")
}

pub(super) fn is_vowel(c: u8) -> bool {
    b"aeiou".contains(&c)
}

// ---------------------------------------------------------------------------
// Free text

#[derive(Clone, Copy)]
pub(super) enum Slot {
    Det,
    DetPl,
    Adj,
    Noun,
    Nouns,
    Verb,
    VerbS,
    Ing,
    Adv,
    Prep,
    Conj,
    Pron,
    Num,
    Comma,
    Phrase,
}

/// Sentence shapes: word order is what makes phrases like "for the" and
/// "with a" recur as they do in real text, which a dictionary exploits.
pub(super) const SENTENCES: &[&[Slot]] = {
    use Slot::*;
    &[
        &[Det, Adj, Noun, VerbS, DetPl, Adj, Nouns, Prep, Det, Noun],
        &[Adj, Noun, Phrase],
        &[Det, Adj, Noun, Phrase, Comma, Conj, Pron, Verb, Det, Noun],
        &[Pron, Verb, DetPl, Nouns, Phrase],
        &[Adj, Noun, Prep, Det, Adj, Noun],
        &[Pron, Verb, Adj, Nouns, Prep, Nouns, Comma, Conj, Pron, Adv, Verb, Det, Noun],
        &[Det, Noun, VerbS, Adv, Prep, Adj, Nouns, Conj, Nouns],
        &[Pron, Adv, Verb, Det, Adj, Noun, Prep, Det, Noun],
        &[Det, Adj, Noun, Conj, Det, Adj, Noun, Prep, Ing, Nouns],
        &[Adv, Adj, Comma, Det, Noun, VerbS, Nouns, Conj, Nouns],
        &[Ing, Nouns, Prep, Det, Adj, Noun],
        &[Num, Nouns, Prep, Det, Noun, Comma, Adj, Conj, Adj],
        &[DetPl, Nouns, Verb, Adv, Conj, Pron, Verb, Det, Noun],
    ]
};

/// What a text is about: real descriptions keep coming back to a few
/// words ("this lamp … the lamp's shade"), and the items of one listing
/// share them, which is much of what makes a page compress.
pub(super) struct Topic {
    pub(super) nouns: [usize; 6],
    pub(super) adjectives: [usize; 3],
}

/// Share of sentences that are stock sentences.
pub(super) const STOCK_SHARE: f64 = 0.35;

/// Share of nouns and adjectives taken from the topic.
pub(super) const TOPIC_SHARE: f64 = 0.4;

impl Topic {
    pub(super) fn new(c: &Corpus, rng: &mut SmallRng) -> Topic {
        Topic {
            nouns: std::array::from_fn(|_| c.nouns.index(rng)),
            adjectives: std::array::from_fn(|_| c.adjectives.index(rng)),
        }
    }

    pub(super) fn noun(&self, c: &Corpus, rng: &mut SmallRng) -> usize {
        if rng.random_bool(TOPIC_SHARE) {
            self.nouns[rng.random_range(0..self.nouns.len())]
        } else {
            c.nouns.index(rng)
        }
    }

    pub(super) fn adjective(&self, c: &Corpus, rng: &mut SmallRng) -> usize {
        if rng.random_bool(TOPIC_SHARE) {
            self.adjectives[rng.random_range(0..self.adjectives.len())]
        } else {
            c.adjectives.index(rng)
        }
    }
}

/// Appends exactly `len` bytes of text (ASCII without quotes or
/// backslashes: nothing to escape). Sentences are written token by token
/// while a token leaves room to finish; the rest is closed with words of
/// exactly the length left and a period, so texts end on whole words.
pub(super) fn write_text(out: &mut Vec<u8>, c: &Corpus, rng: &mut SmallRng, kind: Kind, topic: &Topic, len: usize) {
    if len < Text::CLOSE {
        // Only the smallest objects get here.
        return out.extend_from_slice(["", "-", "ok", "Ok.", "New."][len].as_bytes());
    }
    let mut t = Text { start: out.len(), end: out.len() + len, out, capital: true, article: false };
    'text: loop {
        if rng.random_bool(STOCK_SHARE) {
            if !t.word(c.stock[kind as usize].get(rng)) {
                break;
            }
            continue;
        }
        let shape = SENTENCES[rng.random_range(0..SENTENCES.len())];
        let mut digits = itoa::Buffer::new();
        for &slot in shape {
            let word: &str = match slot {
                Slot::Comma => {
                    if !t.punct(b',') {
                        break 'text;
                    }
                    continue;
                }
                Slot::Num => digits.format(rng.random_range(2..=60u32)),
                Slot::Det => c.determiners.get(rng),
                Slot::DetPl => c.determiners_plural.get(rng),
                Slot::Adj => &c.adjectives.items[topic.adjective(c, rng)],
                Slot::Noun => &c.nouns.items[topic.noun(c, rng)],
                Slot::Nouns => &c.plurals[topic.noun(c, rng)],
                Slot::Verb => c.verbs.get(rng),
                Slot::VerbS => &c.verbs_s[c.verbs.index(rng)],
                Slot::Ing => &c.verbs_ing[c.verbs.index(rng)],
                Slot::Adv => c.adverbs.get(rng),
                Slot::Prep => c.prepositions.get(rng),
                Slot::Conj => c.conjunctions.get(rng),
                Slot::Pron => c.pronouns.get(rng),
                Slot::Phrase => c.phrases.get(rng),
            };
            if !t.word(word) {
                break 'text;
            }
        }
        if !t.punct(b'.') {
            break;
        }
        t.capital = true;
    }
    // Close with words of chosen lengths: `b` bytes of words and spaces.
    let sep = usize::from(t.out.len() > t.start);
    let mut b = t.end - t.out.len() - sep - 1;
    t.article = false;
    // Adjectives, then a noun of exactly the length left: "… soft blankets."
    while b > MAX_FILL || (b >= 8 && rng.random_bool(0.5)) {
        let w = (0..4).map(|_| c.adjectives.get(rng)).find(|w| w.len() + 4 <= b).unwrap_or("new");
        t.put(w);
        b -= w.len() + 1;
    }
    t.put(c.filler(rng, b));
    t.out.push(b'.');
    debug_assert_eq!(t.out.len(), t.end);
}

/// Longest noun asked for to end a text; the lists have nouns of every
/// length from 3 to it.
pub(super) const MAX_FILL: usize = 12;

/// Text being written against its end.
pub(super) struct Text<'a> {
    pub(super) out: &'a mut Vec<u8>,
    pub(super) start: usize,
    pub(super) end: usize,
    /// The next word starts a sentence.
    pub(super) capital: bool,
    /// The last word was `a`, to become `an` before a vowel.
    pub(super) article: bool,
}

impl Text<'_> {
    /// Room the closing words need: a space, a three-letter noun and a
    /// period.
    const CLOSE: usize = 5;

    /// Appends a word (or stock sentence) if enough room stays to close.
    pub(super) fn word(&mut self, w: &str) -> bool {
        let an = self.article && w.as_bytes().first().is_some_and(|&b| is_vowel(b));
        let sep = usize::from(self.out.len() > self.start);
        if self.out.len() + usize::from(an) + sep + w.len() + Self::CLOSE > self.end {
            return false;
        }
        self.put(w);
        true
    }

    /// Appends a word whatever room is left.
    pub(super) fn put(&mut self, w: &str) {
        let an = self.article && w.as_bytes().first().is_some_and(|&b| is_vowel(b));
        if an {
            self.out.push(b'n');
        }
        if self.out.len() > self.start {
            self.out.push(b' ');
        }
        let at = self.out.len();
        self.out.extend_from_slice(w.as_bytes());
        if self.capital {
            self.out[at].make_ascii_uppercase();
            self.capital = false;
        }
        self.article = w == "a";
        // A stock sentence ends one.
        if w.ends_with('.') {
            self.capital = true;
        }
    }

    pub(super) fn punct(&mut self, p: u8) -> bool {
        if self.out.len() + 1 + Self::CLOSE > self.end {
            return false;
        }
        self.out.push(p);
        true
    }
}
