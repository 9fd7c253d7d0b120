//! Word and name lists for the realistic JSON generator ([`super::api`]).
//!
//! Written for this crate, not taken from a corpus: enough distinct entries
//! that a trained dictionary cannot hold every combination, ordered roughly
//! commonest first because the generator draws them with zipf weights by
//! position, the way real text and real name columns are skewed.

/// Countable nouns, singular, commonest first; plurals are derived.
pub const NOUNS: &str = "\
time year day week month hour minute morning evening night weekend season summer winter spring autumn \
holiday customer user member client partner owner guest visitor student teacher parent kid baby player \
artist designer developer engineer manager leader founder writer reader author editor photographer traveler \
runner rider driver cook chef baker farmer builder maker seller buyer shopper fan neighbor community company \
business brand shop store market office studio workshop factory warehouse kitchen bedroom bathroom garden \
yard balcony patio garage room house home apartment building city town village street road park beach lake \
river mountain forest island coast valley trail path bridge station airport hotel restaurant cafe bar gym \
school university library museum gallery theater stadium hospital clinic bank farm field project product \
service feature tool app platform system device phone laptop computer tablet screen camera speaker battery \
charger cable button light lamp switch sensor motor engine wheel tire bike car truck bus train plane boat \
ticket map guide book story article post blog video photo picture image song album playlist podcast show \
movie film game match race event festival concert party wedding meeting call email message note letter card \
gift box bag bottle cup glass plate bowl table chair sofa bed desk door window wall floor roof corner \
surface edge side top bottom handle lid pocket strap zipper fabric material color shade pattern design style \
shape size fit weight length width height detail finish texture layer coat jacket shirt dress shoe boot sock \
hat scarf glove ring necklace bracelet recipe meal breakfast lunch dinner snack dish sauce soup salad bread \
cake cookie pizza burger sandwich coffee tea juice drink wine beer fruit apple banana berry orange lemon \
vegetable flavor taste smell sound voice noise price cost deal discount offer order payment delivery \
shipment package return refund warranty account profile password login setting option choice plan \
subscription trial upgrade update version release bug issue problem question answer idea goal result report \
review rating comment opinion experience moment memory dream step process method approach strategy solution \
value benefit temperature sun snow wind sky star moon cloud tree flower plant seed root branch animal dog \
cat bird horse pet toy puzzle hobby sport ball coach score win level stage chapter page section list chart \
number percent dollar mile kilometer inch piece part set pair pack kit bundle collection range line model \
edition item unit label tag sticker logo name title topic subject theme category group class lesson course \
skill job career role task salary budget fund investment industry trend change challenge opportunity risk \
advantage reason purpose effect impact difference standard rule policy right term condition agreement \
contract license record future region state area zone place spot location address neighborhood planet ocean \
sea wave shore rock hill desert camp tent cabin lodge resort cruise flight journey trip tour adventure \
vacation destination view sunset sunrise friend family visit habit routine workout exercise run walk ride \
hike swim climb yoga session program schedule calendar deadline reminder alert notification request response \
error warning link website browser download upload file folder document form query search filter keyword tab \
menu icon panel widget dashboard graph metric signal network server cluster node database cache queue backup \
storage disk processor chip board port adapter keyboard monitor printer scanner router modem headset earbud \
microphone remote console controller drone robot gadget accessory case cover sleeve stand mount holder clip \
hook rack tray basket bin jar can mug kettle pan pot fork spoon blender toaster oven fridge freezer stove \
sink faucet shower towel pillow blanket sheet mattress rug curtain mirror frame candle vase clock planter \
fence gate porch deck pool grill cushion stool bench cabinet drawer closet wardrobe helmet backpack wallet \
purse suitcase umbrella sunglass sneaker sandal hoodie sweater legging pant skirt vest uniform costume mask \
badge medal trophy prize reward bonus coupon voucher receipt invoice bill fee tax rate balance loan credit \
debit transfer deposit saving expense income profit revenue sale purchase supplier vendor retailer \
distributor carrier courier van pallet container crate parcel envelope stamp instruction manual tutorial tip \
trick secret example sample demo preview draft template layout font header footer margin border column row \
cell grid block paragraph sentence word phrase quote slogan headline caption description summary overview \
introduction conclusion volume episode trailer scene character villain actor singer band drummer guitarist \
dancer painter sculptor poet novelist critic journalist reporter blogger creator influencer streamer gamer \
athlete champion winner rookie veteran expert beginner professional amateur volunteer intern employee \
employer colleague boss director officer agent assistant consultant specialist technician mechanic plumber \
electrician carpenter gardener cleaner nurse doctor dentist therapist trainer instructor tutor mentor lawyer \
judge mayor senator citizen resident tenant landlord host";

/// Verbs, base form, commonest first; `-s` and `-ing` forms are derived.
pub const VERBS: &str = "\
make use get find give tell work call try ask need feel become leave put mean keep let begin seem help talk \
turn start show hear play run move like live believe hold bring happen write provide sit stand pay meet \
include continue set learn change lead understand watch follow stop create speak read allow add spend grow \
open walk win offer remember love consider appear buy wait serve send expect build stay fall reach remain \
suggest raise pass sell require report decide pull return explain hope develop carry break receive agree \
support produce eat cover catch draw choose cause point listen realize place close involve increase improve \
enjoy prefer design deliver ship order pack wear fit clean wash dry cook bake taste mix pour store share \
post upload download install update upgrade connect charge replace repair fix check test measure compare \
review rate recommend visit explore discover travel book plan organize manage track save protect shine glow \
last combine feature blend balance boost reduce extend adjust fold lock unlock attach hang mount slide \
rotate press light heat cool freeze brew roast grill slice chop stir host launch release announce publish \
edit record capture film stream subscribe join register sign log search browse filter sort scroll click tap \
swipe type print scan copy paste delete restore sync backup export import convert render load refresh \
respond reply message email text invite welcome greet thank celebrate gather collect select pick mark \
highlight note list count handle process transform inspire motivate encourage empower simplify complete \
finish achieve earn gain score miss succeed recover rest relax sleep dream wake stretch train jog hike swim \
climb paddle surf ski skate cycle drive ride fly land sail camp fish plant water harvest feed groom adopt \
rescue foster volunteer donate fund invest borrow lend budget afford bill refund cancel exchange wrap arrive \
depart board rent lease own split trade swap price discount promote advertise market target engage retain \
scale hire onboard mentor coach teach tutor study practice master";

/// Adjectives, commonest first.
pub const ADJECTIVES: &str = "\
new good great small large big little old young long short high low early late easy hard fast quick slow \
light dark bright clean fresh cool warm hot cold soft smooth rough heavy strong simple clear full empty open \
free special perfect classic modern natural original premium basic solid durable reliable comfortable \
portable compact lightweight sturdy flexible versatile practical stylish elegant beautiful pretty lovely \
cute gorgeous stunning amazing awesome excellent fantastic wonderful brilliant incredible impressive \
outstanding superb decent average fine nice friendly helpful useful handy smart clever quiet loud calm busy \
happy glad proud excited curious careful gentle kind honest fair safe secure private public local global \
national international regional urban rural coastal tropical seasonal annual monthly weekly daily hourly \
recent current future final main major minor key central primary secondary extra additional optional \
standard custom personal professional commercial industrial digital mobile wireless electric manual \
automatic organic healthy tasty delicious sweet sour spicy salty crispy creamy rich savory juicy frozen raw \
cooked baked grilled roasted handmade homemade vintage rustic minimal bold colorful neutral matte glossy \
shiny waterproof breathable adjustable removable foldable reusable recyclable sustainable affordable cheap \
expensive valuable rare unique popular favorite famous common typical regular normal unusual strange weird \
funny serious important necessary available ready responsive intuitive powerful efficient silent accurate \
precise steady stable balanced generous spacious roomy cozy tiny huge wide narrow deep shallow thick thin \
tall round square flat sharp vivid pale golden silver green blue red black white gray brown pink purple \
yellow beige ivory wooden metallic ceramic cotton woolen leather plastic glassy stainless elastic soft-touch \
non-stick easy-to-use long-lasting all-day well-made hand-picked eco-friendly kid-friendly pet-friendly \
family-friendly budget-friendly top-rated best-selling limited exclusive official authentic genuine \
certified verified trusted fast-charging high-quality low-cost full-size mid-size plus-size extra-large \
oversized slim-fit relaxed casual formal sporty outdoor indoor everyday weekend nightly morning evening \
summer winter spring autumn";

/// Adverbs, commonest first.
pub const ADVERBS: &str = "\
very really quite rather too so just also still even only already always never often sometimes usually \
easily quickly slowly gently carefully simply truly fully nearly almost perfectly beautifully nicely highly \
extremely incredibly surprisingly absolutely completely totally entirely mostly mainly especially \
particularly finally recently currently actually probably definitely certainly clearly instantly immediately \
regularly daily weekly together apart forward back outside inside nearby everywhere online offline again \
soon later today tonight tomorrow";

/// Words that open a noun phrase with a singular noun.
pub const DETERMINERS: &[&str] =
    &["the", "a", "this", "our", "your", "every", "each", "its", "their", "that", "one", "any"];
/// Words that open a noun phrase with a plural noun.
pub const DETERMINERS_PLURAL: &[&str] =
    &["the", "these", "our", "your", "all", "many", "some", "those", "two", "three", "several", "most", "their"];
pub const PREPOSITIONS: &[&str] = &[
    "with", "for", "in", "on", "from", "at", "by", "into", "over", "without", "across", "through", "under", "after",
    "during", "between", "around", "near", "within", "about", "like",
];
pub const CONJUNCTIONS: &[&str] = &["and", "but", "or", "so", "while", "because", "yet"];
/// Subjects that take a verb's base form.
pub const PRONOUNS: &[&str] = &["you", "we", "they", "I"];

#[rustfmt::skip]
pub const FIRST_NAMES: &[&str] = &[
    "James", "Mary", "John", "Patricia", "Robert", "Jennifer", "Michael", "Linda", "William", "Elizabeth", "David",
    "Barbara", "Richard", "Susan", "Joseph", "Jessica", "Thomas", "Sarah", "Charles", "Karen", "Christopher",
    "Lisa", "Daniel", "Nancy", "Matthew", "Betty", "Anthony", "Margaret", "Mark", "Sandra", "Donald", "Ashley",
    "Steven", "Kimberly", "Paul", "Emily", "Andrew", "Donna", "Joshua", "Michelle", "Kenneth", "Carol", "Kevin",
    "Amanda", "Brian", "Dorothy", "George", "Melissa", "Timothy", "Deborah", "Ronald", "Stephanie", "Edward",
    "Rebecca", "Jason", "Sharon", "Jeffrey", "Laura", "Ryan", "Cynthia", "Jacob", "Kathleen", "Gary", "Amy",
    "Nicholas", "Angela", "Eric", "Shirley", "Jonathan", "Anna", "Stephen", "Brenda", "Larry", "Pamela", "Justin",
    "Emma", "Scott", "Nicole", "Brandon", "Helen", "Benjamin", "Samantha", "Samuel", "Katherine", "Gregory",
    "Christine", "Alexander", "Debra", "Frank", "Rachel", "Patrick", "Carolyn", "Raymond", "Janet", "Jack",
    "Catherine", "Dennis", "Maria", "Jerry", "Heather", "Tyler", "Diane", "Aaron", "Ruth", "José", "Julie", "Adam",
    "Olivia", "Nathan", "Joyce", "Henry", "Virginia", "Douglas", "Victoria", "Zachary", "Kelly", "Peter", "Lauren",
    "Kyle", "Christina", "Ethan", "Joan", "Walter", "Evelyn", "Noah", "Judith", "Jeremy", "Megan", "Christian",
    "Andrea", "Keith", "Cheryl", "Roger", "Hannah", "Terry", "Jacqueline", "Gerald", "Martha", "Harold", "Gloria",
    "Sean", "Teresa", "Austin", "Ann", "Carl", "Sara", "Arthur", "Madison", "Lawrence", "Frances", "Dylan",
    "Kathryn", "Jesse", "Janice", "Jordan", "Jean", "Bryan", "Abigail", "Billy", "Alice", "Joe", "Judy", "Bruce",
    "Sophia", "Gabriel", "Grace", "Logan", "Denise", "Albert", "Amber", "Willie", "Doris", "Alan", "Marilyn",
    "Juan", "Danielle", "Wayne", "Beverly", "Elijah", "Isabella", "Randy", "Theresa", "Roy", "Diana", "Vincent",
    "Natalie", "Ralph", "Brittany", "Eugene", "Charlotte", "Russell", "Marie", "Bobby", "Kayla", "Mason", "Alexis",
    "Philip", "Lori", "Louis", "Liam", "Lucas", "Mateo", "Hugo", "Léa", "Chloé", "Camille", "Lukas", "Leon", "Finn",
    "Mia", "Lena", "Sofia", "Giulia", "Marco", "Luca", "Alessandro", "Francesca", "Hiroshi", "Yuki", "Haruto",
    "Sakura", "Wei", "Ming", "Priya", "Arjun", "Rahul", "Ananya", "Aisha", "Omar", "Fatima", "Mohammed", "Ahmed",
    "Carlos", "Diego", "Lucía", "Valentina", "Javier", "Pablo", "Ana", "João", "Pedro", "Mariana", "Gabriela",
    "Ivan", "Olga", "Dmitri", "Anastasia", "Sven", "Ingrid", "Astrid", "Lars", "Erik", "Nils", "Freya", "Søren",
    "Zoë", "Noor", "Yusuf", "Kwame", "Amara", "Chidi", "Thabo", "Zanele", "Mei", "Jin", "Hana", "Minho", "Jae",
];

#[rustfmt::skip]
pub const LAST_NAMES: &[&str] = &[
    "Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez", "Martinez",
    "Hernandez", "Lopez", "Gonzalez", "Wilson", "Anderson", "Thomas", "Taylor", "Moore", "Jackson", "Martin", "Lee",
    "Perez", "Thompson", "White", "Harris", "Sanchez", "Clark", "Ramirez", "Lewis", "Robinson", "Walker", "Young",
    "Allen", "King", "Wright", "Scott", "Torres", "Nguyen", "Hill", "Flores", "Green", "Adams", "Nelson", "Baker",
    "Hall", "Rivera", "Campbell", "Mitchell", "Carter", "Roberts", "Gomez", "Phillips", "Evans", "Turner", "Diaz",
    "Parker", "Cruz", "Edwards", "Collins", "Reyes", "Stewart", "Morris", "Morales", "Murphy", "Cook", "Rogers",
    "Gutierrez", "Ortiz", "Morgan", "Cooper", "Peterson", "Bailey", "Reed", "Kelly", "Howard", "Ramos", "Kim",
    "Cox", "Ward", "Richardson", "Watson", "Brooks", "Chavez", "Wood", "James", "Bennett", "Gray", "Mendoza",
    "Ruiz", "Hughes", "Price", "Alvarez", "Castillo", "Sanders", "Patel", "Myers", "Long", "Ross", "Foster",
    "Jimenez", "Powell", "Jenkins", "Perry", "Russell", "Sullivan", "Bell", "Coleman", "Butler", "Henderson",
    "Barnes", "Fisher", "Vasquez", "Simmons", "Romero", "Jordan", "Patterson", "Alexander", "Hamilton", "Graham",
    "Reynolds", "Griffin", "Wallace", "Moreno", "West", "Cole", "Hayes", "Bryant", "Herrera", "Gibson", "Ellis",
    "Tran", "Medina", "Aguilar", "Stevens", "Murray", "Ford", "Castro", "Marshall", "Owens", "Harrison",
    "Fernandez", "McDonald", "Woods", "Washington", "Kennedy", "Wells", "Vargas", "Henry", "Chen", "Freeman",
    "Webb", "Tucker", "Guzman", "Burns", "Crawford", "Olson", "Simpson", "Porter", "Hunter", "Gordon", "Mendez",
    "Silva", "Shaw", "Snyder", "Mason", "Dixon", "Muñoz", "Hunt", "Hicks", "Holmes", "Palmer", "Wagner", "Black",
    "Robertson", "Boyd", "Rose", "Stone", "Salazar", "Fox", "Warren", "Mills", "Meyer", "Rice", "Schmidt", "Garza",
    "Daniels", "Ferguson", "Nichols", "Stephens", "Soto", "Weaver", "Ryan", "Gardner", "Payne", "Grant", "Dunn",
    "Spencer", "Hawkins", "Arnold", "Pierce", "Hansen", "Peters", "Santos", "Hart", "Bradley", "Knight", "Elliott",
    "Cunningham", "Duncan", "Armstrong", "Hudson", "Carroll", "Lane", "Riley", "Andrews", "Ray", "Delgado", "Berry",
    "Perkins", "Hoffman", "Johnston", "Matthews", "Peña", "Richards", "Willis", "Carpenter", "Lawrence", "Müller",
    "Schneider", "Fischer", "Weber", "Becker", "Schulz", "Dubois", "Durand", "Lefebvre", "Moreau", "Laurent",
    "Rossi", "Russo", "Ferrari", "Bianchi", "Romano", "Colombo", "Tanaka", "Suzuki", "Takahashi", "Watanabe",
    "Sato", "Yamamoto", "Wang", "Zhang", "Liu", "Yang", "Huang", "Zhao", "Wu", "Zhou", "Singh", "Kumar", "Sharma",
    "Gupta", "Shah", "Khan", "Ali", "Hassan", "Ivanov", "Petrov", "Smirnov", "Novak", "Kowalski", "Nowak",
    "Johansson", "Andersson", "Larsen", "Nielsen", "Jensen", "Okafor", "Mensah", "Dlamini", "Costa", "Oliveira",
    "Pereira", "Almeida",
];

/// Country code, locale, currency, time zone.
#[rustfmt::skip]
pub const COUNTRIES: &[(&str, &str, &str, &str)] = &[
    ("US", "en-US", "USD", "America/New_York"), ("GB", "en-GB", "GBP", "Europe/London"),
    ("DE", "de-DE", "EUR", "Europe/Berlin"), ("FR", "fr-FR", "EUR", "Europe/Paris"),
    ("CA", "en-CA", "CAD", "America/Toronto"), ("IN", "hi-IN", "INR", "Asia/Kolkata"),
    ("JP", "ja-JP", "JPY", "Asia/Tokyo"), ("BR", "pt-BR", "BRL", "America/Sao_Paulo"),
    ("ES", "es-ES", "EUR", "Europe/Madrid"), ("IT", "it-IT", "EUR", "Europe/Rome"),
    ("AU", "en-AU", "AUD", "Australia/Sydney"), ("MX", "es-MX", "MXN", "America/Mexico_City"),
    ("NL", "nl-NL", "EUR", "Europe/Amsterdam"), ("KR", "ko-KR", "KRW", "Asia/Seoul"),
    ("CN", "zh-CN", "CNY", "Asia/Shanghai"), ("SE", "sv-SE", "SEK", "Europe/Stockholm"),
    ("PL", "pl-PL", "PLN", "Europe/Warsaw"), ("IE", "en-IE", "EUR", "Europe/Dublin"),
    ("CH", "de-CH", "CHF", "Europe/Zurich"), ("AT", "de-AT", "EUR", "Europe/Vienna"),
    ("BE", "nl-BE", "EUR", "Europe/Brussels"), ("PT", "pt-PT", "EUR", "Europe/Lisbon"),
    ("NO", "nb-NO", "NOK", "Europe/Oslo"), ("DK", "da-DK", "DKK", "Europe/Copenhagen"),
    ("FI", "fi-FI", "EUR", "Europe/Helsinki"), ("CZ", "cs-CZ", "CZK", "Europe/Prague"),
    ("HU", "hu-HU", "HUF", "Europe/Budapest"), ("GR", "el-GR", "EUR", "Europe/Athens"),
    ("TR", "tr-TR", "TRY", "Europe/Istanbul"), ("SG", "en-SG", "SGD", "Asia/Singapore"),
    ("HK", "zh-HK", "HKD", "Asia/Hong_Kong"), ("TW", "zh-TW", "TWD", "Asia/Taipei"),
    ("TH", "th-TH", "THB", "Asia/Bangkok"), ("ID", "id-ID", "IDR", "Asia/Jakarta"),
    ("PH", "en-PH", "PHP", "Asia/Manila"), ("NZ", "en-NZ", "NZD", "Pacific/Auckland"),
    ("AR", "es-AR", "ARS", "America/Argentina/Buenos_Aires"), ("CL", "es-CL", "CLP", "America/Santiago"),
    ("PE", "es-PE", "PEN", "America/Lima"), ("CO", "es-CO", "COP", "America/Bogota"),
    ("ZA", "en-ZA", "ZAR", "Africa/Johannesburg"), ("NG", "en-NG", "NGN", "Africa/Lagos"),
    ("KE", "en-KE", "KES", "Africa/Nairobi"), ("EG", "ar-EG", "EGP", "Africa/Cairo"),
    ("AE", "ar-AE", "AED", "Asia/Dubai"), ("IL", "he-IL", "ILS", "Asia/Jerusalem"),
];

/// City and its country code (one of [`COUNTRIES`]).
#[rustfmt::skip]
pub const CITIES: &[(&str, &str)] = &[
    ("New York", "US"), ("Los Angeles", "US"), ("Chicago", "US"), ("Houston", "US"), ("London", "GB"),
    ("Berlin", "DE"), ("Paris", "FR"), ("Toronto", "CA"), ("Phoenix", "US"), ("Philadelphia", "US"),
    ("San Antonio", "US"), ("San Diego", "US"), ("Dallas", "US"), ("Austin", "US"), ("Seattle", "US"),
    ("Mumbai", "IN"), ("Tokyo", "JP"), ("São Paulo", "BR"), ("Madrid", "ES"), ("Denver", "US"), ("Boston", "US"),
    ("Portland", "US"), ("Atlanta", "US"), ("Miami", "US"), ("Munich", "DE"), ("Hamburg", "DE"),
    ("Manchester", "GB"), ("Sydney", "AU"), ("Melbourne", "AU"), ("Mexico City", "MX"), ("Amsterdam", "NL"),
    ("Rome", "IT"), ("Milan", "IT"), ("Barcelona", "ES"), ("Vancouver", "CA"), ("Montreal", "CA"),
    ("Minneapolis", "US"), ("Nashville", "US"), ("Detroit", "US"), ("Baltimore", "US"), ("Calgary", "CA"),
    ("Ottawa", "CA"), ("Birmingham", "GB"), ("Glasgow", "GB"), ("Leeds", "GB"), ("Bristol", "GB"),
    ("Edinburgh", "GB"), ("Dublin", "IE"), ("Cork", "IE"), ("Lyon", "FR"), ("Marseille", "FR"), ("Toulouse", "FR"),
    ("Nice", "FR"), ("Bordeaux", "FR"), ("Cologne", "DE"), ("Frankfurt", "DE"), ("Stuttgart", "DE"),
    ("Leipzig", "DE"), ("Vienna", "AT"), ("Zurich", "CH"), ("Geneva", "CH"), ("Rotterdam", "NL"), ("Utrecht", "NL"),
    ("Brussels", "BE"), ("Antwerp", "BE"), ("Valencia", "ES"), ("Seville", "ES"), ("Lisbon", "PT"), ("Porto", "PT"),
    ("Naples", "IT"), ("Turin", "IT"), ("Florence", "IT"), ("Stockholm", "SE"), ("Gothenburg", "SE"),
    ("Oslo", "NO"), ("Copenhagen", "DK"), ("Helsinki", "FI"), ("Warsaw", "PL"), ("Kraków", "PL"), ("Prague", "CZ"),
    ("Budapest", "HU"), ("Athens", "GR"), ("Istanbul", "TR"), ("Osaka", "JP"), ("Kyoto", "JP"), ("Yokohama", "JP"),
    ("Seoul", "KR"), ("Busan", "KR"), ("Beijing", "CN"), ("Shanghai", "CN"), ("Shenzhen", "CN"),
    ("Hong Kong", "HK"), ("Taipei", "TW"), ("Singapore", "SG"), ("Bangkok", "TH"), ("Jakarta", "ID"),
    ("Manila", "PH"), ("Delhi", "IN"), ("Bangalore", "IN"), ("Chennai", "IN"), ("Hyderabad", "IN"),
    ("Brisbane", "AU"), ("Perth", "AU"), ("Auckland", "NZ"), ("Rio de Janeiro", "BR"), ("Buenos Aires", "AR"),
    ("Santiago", "CL"), ("Lima", "PE"), ("Bogotá", "CO"), ("Guadalajara", "MX"), ("Monterrey", "MX"),
    ("Cape Town", "ZA"), ("Johannesburg", "ZA"), ("Lagos", "NG"), ("Nairobi", "KE"), ("Cairo", "EG"),
    ("Dubai", "AE"), ("Tel Aviv", "IL"),
];

#[rustfmt::skip]
pub const STREET_NAMES: &[&str] = &[
    "Main", "Oak", "Maple", "Pine", "Cedar", "Elm", "Park", "Lake", "Hill", "Washington", "Church", "High", "Mill",
    "Station", "River", "Sunset", "Spring", "Market", "Bridge", "King", "Queen", "Meadow", "Forest", "Garden",
    "Harbor", "Lincoln", "Franklin", "Jefferson", "Madison", "Willow", "Birch", "Chestnut", "Walnut", "Highland",
    "Valley", "Ridge", "Union", "Center", "Broad", "Water", "Court", "School", "North", "South", "East", "West",
    "Green", "Victoria", "Albert", "Castle",
];
pub const STREET_KINDS: &[&str] =
    &["Street", "Avenue", "Road", "Lane", "Drive", "Court", "Boulevard", "Way", "Place", "Terrace", "Parkway"];

#[rustfmt::skip]
pub const EMAIL_DOMAINS: &[&str] = &[
    "gmail.com", "yahoo.com", "outlook.com", "hotmail.com", "icloud.com", "proton.me", "aol.com", "gmx.de",
    "live.com", "web.de", "me.com", "orange.fr", "mail.ru", "qq.com", "yandex.ru", "free.fr", "libero.it",
    "comcast.net", "btinternet.com", "fastmail.com", "163.com", "naver.com", "hey.com", "zoho.com", "t-online.de",
];

/// Halves of made-up brand names (`North` + `forge`).
pub const BRAND_HEADS: &[&str] = &[
    "North", "Bright", "Blue", "Silver", "Iron", "Oak", "Pine", "Terra", "Aqua", "Sol", "Luna", "Nova", "Zen", "Peak",
    "Summit", "River", "Stone", "Red", "Green", "True", "Urban", "Wild", "Echo", "Prime", "Swift", "Clear", "Bold",
    "Core", "Haven", "Maple", "Cedar", "Fox", "Wolf", "Bear", "Eagle", "Harbor", "Vel", "Nor", "Arc", "Kin",
];
pub const BRAND_TAILS: &[&str] = &[
    "land", "ware", "works", "craft", "co", "labs", "gear", "home", "line", "wood", "field", "point", "wave", "ridge",
    "vale", "forge", "tech", "goods", "supply", "studio", "house", "well", "mark", "nest",
];
pub const COMPANY_SUFFIXES: &[&str] = &["Inc.", "LLC", "Ltd", "GmbH", "Group", "Co.", "AB", "S.A.", "Pty Ltd"];

#[rustfmt::skip]
pub const PRODUCT_ADJECTIVES: &[&str] = &[
    "Classic", "Compact", "Portable", "Wireless", "Premium", "Modern", "Essential", "Lightweight", "Ergonomic",
    "Deluxe", "Slim", "Smart", "Vintage", "Rustic", "Foldable", "Adjustable", "Waterproof", "Insulated",
    "Rechargeable", "Handcrafted", "Organic", "Reusable", "Stackable", "Magnetic", "Cordless", "Heavy-Duty",
    "Ultra", "Mini", "Pro", "Eco", "Soft", "Durable", "Sleek", "Elegant", "Rugged", "Everyday", "Outdoor", "Travel",
    "Kids", "Digital", "Thermal", "Quick-Dry", "Non-Stick", "Anti-Slip", "Wall-Mounted", "Large", "Small", "Round",
    "Square", "Deep", "Minimalist", "Recycled", "Padded", "Quilted", "Convertible", "Extendable", "Silent", "Dual",
    "Smart Home", "All-Weather",
];
#[rustfmt::skip]
pub const MATERIALS: &[&str] = &[
    "Steel", "Cotton", "Wooden", "Leather", "Ceramic", "Bamboo", "Glass", "Aluminum", "Linen", "Wool", "Silicone",
    "Marble", "Copper", "Brass", "Oak", "Walnut", "Rubber", "Plastic", "Concrete", "Bronze", "Titanium", "Velvet",
    "Denim", "Canvas", "Cork", "Nylon", "Polyester", "Porcelain", "Stone", "Carbon", "Felt", "Silk", "Suede",
    "Acrylic", "Granite",
];
#[rustfmt::skip]
pub const PRODUCT_NOUNS: &[&str] = &[
    "Lamp", "Chair", "Table", "Mug", "Bottle", "Backpack", "Jacket", "Shoes", "Watch", "Keyboard", "Mouse",
    "Headphones", "Speaker", "Charger", "Cable", "Blender", "Kettle", "Frying Pan", "Knife Set", "Cutting Board",
    "Towel", "Pillow", "Blanket", "Rug", "Shelf", "Desk", "Stool", "Bench", "Planter", "Vase", "Candle",
    "Picture Frame", "Mirror", "Wall Clock", "Wallet", "Belt", "Hat", "Scarf", "Gloves", "Socks", "Sweater",
    "Hoodie", "T-Shirt", "Jeans", "Dress", "Skirt", "Sneakers", "Boots", "Sandals", "Sunglasses", "Umbrella",
    "Tent", "Sleeping Bag", "Lantern", "Flashlight", "Thermos", "Lunch Box", "Notebook", "Pen", "Pencil Case",
    "Desk Organizer", "Monitor Stand", "Webcam", "Microphone", "Router", "Hard Drive", "Tablet Case", "Phone Case",
    "Power Bank", "Watch Band", "Fitness Tracker", "Yoga Mat", "Dumbbell", "Kettlebell", "Jump Rope",
    "Water Filter", "Coffee Grinder", "Teapot", "Bowl", "Plate", "Spoon Set", "Baking Sheet", "Mixing Bowl",
    "Storage Box", "Hanger", "Laundry Basket", "Shower Curtain", "Bath Mat", "Soap Dispenser", "Bike Helmet",
    "Bike Light", "Car Mount", "Dash Cam", "Tool Kit", "Drill", "Screwdriver Set", "Hammer", "Tape Measure",
    "Garden Hose", "Plant Pot", "Bird Feeder", "Dog Bed", "Cat Tree", "Pet Bowl", "Leash", "Toy Car", "Puzzle",
    "Board Game", "Building Blocks", "Doll", "Kite", "Ball", "Guitar Strap", "Ukulele", "Earbuds", "Projector",
    "Desk Lamp", "Night Light", "Fan", "Heater", "Humidifier", "Air Purifier", "Vacuum", "Iron", "Scale",
];
#[rustfmt::skip]
pub const CATEGORIES: &[&str] = &[
    "electronics", "home", "kitchen", "fashion", "sports", "outdoors", "toys", "beauty", "health", "garden",
    "office", "pets", "shoes", "books", "jewelry", "automotive", "tools", "baby", "grocery", "music", "games",
    "furniture", "lighting", "travel", "crafts",
];
#[rustfmt::skip]
pub const TAGS: &[&str] = &[
    "new", "sale", "bestseller", "gift", "eco-friendly", "limited", "handmade", "organic", "premium", "clearance",
    "bundle", "trending", "summer", "winter", "outdoor", "kids", "travel", "office", "fitness", "vegan", "recycled",
    "wireless", "portable", "waterproof", "smart", "vintage", "minimal", "family", "pet-friendly", "made-in-usa",
    "free-shipping", "exclusive", "back-to-school", "holiday", "spring", "autumn", "camping", "hiking", "cycling",
    "running", "yoga", "gaming", "audio", "video", "photo", "storage", "cleaning", "cooking", "baking", "coffee",
    "tea", "bedroom", "bathroom", "living-room", "garage", "diy", "beauty", "skincare", "haircare", "men", "women",
    "unisex", "baby", "toddler", "teen", "student", "work-from-home", "durable", "lightweight", "compact",
    "rechargeable", "cordless", "ergonomic", "classic", "modern", "rustic", "luxury", "budget", "value-pack",
    "refurbished", "pre-order", "back-in-stock", "staff-pick", "top-rated", "award-winning", "sustainable",
    "fair-trade", "gluten-free", "local",
];
pub const ORDER_STATUSES: &[&str] =
    &["delivered", "shipped", "processing", "pending", "paid", "cancelled", "refunded", "returned", "on_hold"];
pub const CARRIERS: &[&str] =
    &["UPS", "FedEx", "USPS", "DHL", "Royal Mail", "DPD", "La Poste", "GLS", "Canada Post", "Japan Post"];
pub const PAYMENT_METHODS: &[&str] =
    &["card", "paypal", "apple_pay", "google_pay", "bank_transfer", "klarna", "gift_card", "cash_on_delivery"];
pub const CARD_BRANDS: &[&str] = &["visa", "mastercard", "amex", "discover", "jcb", "unionpay"];
pub const ROLES: &[&str] = &["member", "admin", "editor", "viewer", "moderator", "owner", "guest", "support"];
pub const PLANS: &[&str] = &["free", "basic", "pro", "team", "business", "enterprise"];
pub const AD_STATUSES: &[&str] = &["active", "paused", "ended", "scheduled", "draft", "in_review", "rejected"];
pub const AD_FORMATS: &[&str] = &["banner", "native", "video", "carousel", "interstitial", "rewarded", "audio"];
pub const AD_PLACEMENTS: &[&str] = &["feed", "search", "sidebar", "stories", "in_stream", "homepage", "checkout"];
#[rustfmt::skip]
pub const CALLS_TO_ACTION: &[&str] = &[
    "Shop now", "Learn more", "Sign up", "Get offer", "Book now", "Download", "Subscribe", "Contact us",
    "Apply now", "Watch more", "Order now", "Get started",
];
pub const DEVICES: &[&str] = &["mobile", "desktop", "tablet", "ctv"];
pub const UTM_SOURCES: &[&str] = &["google", "facebook", "instagram", "newsletter", "tiktok", "bing", "partner"];

/// Phrases that close a noun phrase; stock wording like this is much of
/// what real descriptions are made of.
#[rustfmt::skip]
pub const PHRASES: &[&str] = &[
    "for everyday use", "at a great price", "for the whole family", "on the go", "in a range of colors",
    "with free shipping", "all year round", "in no time", "for years to come", "right out of the box",
    "at home or at work", "with a modern look", "for a perfect fit", "in a compact size", "at the best price",
    "from morning to night", "with a lifetime warranty", "in just a few minutes", "without breaking the bank",
    "for every season", "in every room", "with easy returns", "for indoor and outdoor use",
    "of the highest quality", "in a classic style", "with a soft finish", "for small spaces", "in two sizes",
    "with a clean design", "for a good night's sleep", "for busy mornings", "on any budget",
    "for beginners and pros alike", "in the city", "near the park", "by the sea", "after work", "on weekends",
    "with friends and family", "since 2015", "over the years", "at the same time", "as soon as possible",
    "in the morning", "at the end of the day", "as well as", "more than ever", "like never before", "in stock now",
];

/// Whole sentences that recur across many records of one kind.
#[rustfmt::skip]
pub const STOCK_PRODUCT: &[&str] = &[
    "Free returns within 30 days.", "Ships within 2 business days.", "Hand wash only.", "Dishwasher safe.",
    "Satisfaction guaranteed.", "Machine washable.", "Easy to clean.", "Batteries not included.",
    "Assembly required.", "One size fits most.", "Limited stock available.", "Perfect for gifting.",
    "Available in three sizes.", "Includes a carrying case.", "BPA free.", "Imported.", "100% cotton.",
    "Easy to assemble.", "Great value for money.", "Back by popular demand.", "While supplies last.",
    "Colors may vary slightly.", "Designed in California.", "Made in Portugal.", "Customers love it.",
];
#[rustfmt::skip]
pub const STOCK_USER: &[&str] = &[
    "Coffee lover.", "Views are my own.", "Always learning.", "Dog person.", "Proud parent.", "Tea over coffee.",
    "Runner and reader.", "Living my best life.", "Open to new opportunities.", "Building things on the internet.",
    "Traveling the world one city at a time.", "Based in the city.", "Husband, father, friend.", "Foodie.",
    "Photographer in my spare time.", "Part-time gardener.", "Cat mom.", "He/him.", "She/her.", "They/them.",
];
#[rustfmt::skip]
pub const STOCK_ORDER: &[&str] = &[
    "Please leave the package at the front door.", "Call on arrival.", "Gift wrap, please.",
    "Do not ring the bell.", "Deliver after 5 pm.", "Leave with the neighbor if not home.",
    "Fragile, handle with care.", "Please include a gift receipt.", "Ring twice.", "Use the side entrance.",
    "Customer requested express shipping.", "Address verified by phone.", "Partial refund issued.",
    "Replacement sent.", "Payment confirmed.", "Awaiting stock.", "Signature required.",
];
#[rustfmt::skip]
pub const STOCK_AD: &[&str] = &[
    "Limited time offer.", "Shop the collection today.", "Free shipping on all orders.", "Up to 50% off.",
    "Join thousands of happy customers.", "Sign up in seconds.", "No credit card required.",
    "Try it free for 30 days.", "Don't miss out.", "New arrivals every week.", "Book your stay today.",
    "Get yours before they're gone.", "Members save more.", "Download the app.", "Offer ends Sunday.",
];
pub const PRODUCT_STATUSES: &[&str] = &["active", "draft", "archived", "out_of_stock"];
pub const RECORD_SOURCES: &[&str] = &["import", "admin", "api", "feed", "migration"];
pub const ORDER_SOURCES: &[&str] = &["web", "ios", "android", "pos", "api"];
pub const FULFILLMENT: &[&str] = &["standard", "express", "pickup", "same_day"];
pub const THEMES: &[&str] = &["system", "light", "dark"];
pub const PACING: &[&str] = &["standard", "accelerated"];
