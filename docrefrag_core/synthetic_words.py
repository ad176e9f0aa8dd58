"""The word pools and sentence templates that the text of the training documents is drawn from.

Domains with the things their pages are about and the (measure, unit) pairs their facts report, the
words the sentence templates are filled with, and the syllables and names of places and people.
"""

DOMAINS = {  # domain -> (things a page is about, (measure, unit) pairs read as "<value> <unit> of <measure>")
    "Energy": (["turbine hall", "substation", "battery store", "feeder line", "solar array", "transformer yard"],
               [("solar output", "megawatts"), ("stored energy", "megawatt hours"), ("grid outages", "hours")]),
    "Transport": (["tram depot", "bus fleet", "river bridge", "interchange", "signal box", "cycle network"],
                  [("passenger travel", "thousand trips"), ("renewed track", "kilometres")]),
    "Health": (["community clinic", "maternity ward", "screening unit", "ambulance base", "pharmacy", "dental service"],
               [("outpatient care", "clinic visits"), ("new capacity", "beds"), ("vaccination", "doses")]),
    "Ecology": (["wetland reserve", "seed bank", "nesting site", "river survey", "forest plot", "meadow trial"],
                [("woodland planting", "trees"), ("bird monitoring", "sightings")]),
    "Finance": (["reserve fund", "grant scheme", "audit office", "payroll system", "procurement round", "tax office"],
                [("grant spending", "thousand euros"), ("supplier billing", "invoices")]),
    "Research": (["telescope dome", "detector array", "sample archive", "cold store", "field station", "data centre"],
                 [("sky survey data", "images"), ("telescope time", "hours"), ("soil sampling", "samples")]),
    "Farming": (["orchard", "grain store", "irrigation canal", "dairy herd", "greenhouse block", "tree nursery"],
                [("wheat", "tonnes"), ("milk", "thousand litres")]),
}
WORDS = {
    "adj": ["regional", "seasonal", "revised", "detailed", "preliminary", "annual", "independent", "shared",
            "temporary", "municipal", "quarterly", "external", "joint", "interim", "technical", "public"],
    "verb": ["reviewed", "expanded", "inspected", "delayed", "funded", "upgraded", "monitored", "compared",
             "replaced", "documented", "audited", "scheduled", "extended", "relocated", "tested", "approved"],
    "team": ["works team", "planning office", "field crew", "steering group", "audit panel", "volunteer group",
             "county board", "safety committee", "design studio", "finance desk"],
    "event": ["the spring floods", "a supplier dispute", "the winter storms", "a budget revision",
              "the public consultation", "a change of contractor", "the summer heatwave", "an equipment recall"],
    "state": ["on schedule", "under review", "within budget", "closed for repairs", "fully staffed",
              "behind schedule", "over budget", "ready for handover"],
    "district": ["the old town", "the harbour district", "the northern suburbs", "the river valley",
                 "the market quarter", "the eastern estates", "the university campus", "the industrial park"],
    "month": ["January", "February", "March", "April", "May", "June", "July", "August", "September",
              "October", "November", "December"],
    "topic": ["review", "update", "summary", "outlook", "progress report", "briefing", "assessment"],
}
TEMPLATES = [
    "The {adj} {noun} was {verb} by the {team} after {event}.",
    "Staff in {district} {verb} the {noun} and reported that the {noun2} remained {state}.",
    "Because the {noun} was {verb} in {month}, the {adj} work on the {noun2} moved to {month2}.",
    "A {adj} review of the {noun} found {count} issues, most of them minor.",
    "Officials in {district} expect the {noun} to be {verb} before {month} {year}.",
    "The {team} {verb} {count} records from the {noun} and shared them with the {team2}.",
    "According to the {team}, the {noun} in {district} is {state} and the {adj} budget is {state2}.",
    "Residents asked whether the {noun} would be {verb} again, and the {team} agreed to publish a {adj} note.",
    "Most of the {count} requests about the {noun} were answered within {small} days.",
    "The {adj} plan for the {noun} lists {small} priorities for {year}.",
    "During {month} the {team} met {small} times to discuss the {adj} {noun2}.",
    "Costs for the {noun} rose after {event}, so the {team} {verb} the {adj} estimate.",
]
PREFIXES = ["Ash", "Bel", "Cor", "Dun", "Elm", "Fair", "Glen", "Hart", "Ivy", "Kes", "Lark", "Mill", "Nor",
             "Oak", "Pen", "Red", "Stan", "Thorn", "Wex", "York", "Bram", "Cale", "Dor", "Fen", "Gold", "Hol"]
SUFFIXES = ["ford", "haven", "mere", "ton", "bridge", "field", "wick", "moor", "stead", "combe", "by", "dale",
             "hurst", "worth", "ley", "gate"]
FIRST = ["Ada", "Bruno", "Chloe", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Keiko", "Luca",
          "Maya", "Nils", "Olga", "Pablo", "Rosa", "Sami", "Tara", "Viktor"]
LAST = ["Moreno", "Lindqvist", "Okafor", "Brennan", "Castillo", "Novak", "Haddad", "Ferreira", "Kowalski",
         "Nakamura", "Dubois", "Ricci", "Svensson", "Osei", "Petrov", "Almeida", "Fischer", "Quinn", "Rahman", "Weber"]
