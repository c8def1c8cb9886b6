"""The message templates of each text domain's labels: data only, so that validating a text dataset's
spec (its labels) imports no numpy nor pandas; :mod:`mlsandbox.data.text` writes the documents."""

from __future__ import annotations

LABEL_TEMPLATES: dict[str, dict[str, list[str]]] = {
    "service_logs": {
        "ok": [
            "INFO {service} GET /api/{resource} 200 in {ms} ms",
            "INFO {service} processed batch of {n} records",
            "DEBUG {service} cache hit ratio {pct}% for {resource}",
        ],
        "timeout": [
            "ERROR {service} upstream request to {host} timed out after {ms} ms",
            "ERROR {service} context deadline exceeded calling {host}",
            "WARN {service} retry {n}/5 after read timeout from {host}",
        ],
        "out_of_memory": [
            "FATAL {service} java.lang.OutOfMemoryError: Java heap space",
            "ERROR {service} container killed: OOMKilled (limit {n}Mi)",
            "ERROR {service} cannot allocate memory for buffer of {n} MB",
        ],
        "auth_failure": [
            "WARN {service} 401 Unauthorized: token expired for user {user}",
            "ERROR {service} permission denied for principal {user} on {resource}",
            "WARN {service} invalid signature on credentials of {user}",
        ],
        "disk_full": [
            "ERROR {service} No space left on device writing {path}",
            "WARN {service} disk usage {pct}% on {path}",
            "ERROR {service} write failed: quota exceeded under {path}",
        ],
    },
    "support_tickets": {
        "billing": [
            "{greeting} I was charged twice for {product} this month. {closing}",
            "{greeting} my invoice shows a refund of {n} dollars that never arrived. {closing}",
            "{greeting} why did my subscription price for {product} go up? {closing}",
        ],
        "technical": [
            "{greeting} {product} crashes every time I open settings. {closing}",
            "{greeting} I get error code {n} when syncing {product}. {closing}",
            "{greeting} {product} is very slow since the last update. {closing}",
        ],
        "account": [
            "{greeting} I cannot log in, the password reset email never comes. {closing}",
            "{greeting} please delete my account and all my data. {closing}",
            "{greeting} how do I change the email address on my account? {closing}",
        ],
        "shipping": [
            "{greeting} my package with {product} has not arrived after {n} days. {closing}",
            "{greeting} the tracking number for {product} does not work. {closing}",
            "{greeting} {product} arrived damaged in the box. {closing}",
        ],
    },
    "medical_reports": {
        "normal": [
            "Findings: lungs are clear. No acute abnormality. Impression: normal study.",
            "Findings: heart size within normal limits, no effusion. Impression: no acute disease.",
            "Findings: bones intact, joint spaces preserved at the {site}. Impression: normal.",
        ],
        "pneumonia": [
            "Findings: patchy consolidation in the {site}. Impression: pneumonia.",
            "Findings: airspace opacity in the {site} with air bronchograms. Impression: infection likely.",
            "Findings: focal infiltrate in the {site}. Impression: consistent with pneumonia.",
        ],
        "fracture": [
            "Findings: cortical break at the {site} with mild displacement. Impression: acute fracture.",
            "Findings: lucent line through the {site}. Impression: nondisplaced fracture.",
            "Findings: comminuted fracture of the {site}. Impression: fracture, orthopedic review.",
        ],
        "cardiomegaly": [
            "Findings: enlarged cardiac silhouette, cardiothoracic ratio {pct}%. Impression: cardiomegaly.",
            "Findings: heart size increased with prominent {site}. Impression: cardiomegaly.",
            "Findings: cardiac enlargement, mild vascular congestion. Impression: cardiomegaly.",
        ],
    },
}
