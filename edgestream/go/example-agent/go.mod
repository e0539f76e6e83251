module cloudstream.local/example-agent

go 1.19

require cloudstream.local/edgestream v0.0.0

// An agent outside this tree points this at its copy of edgestream/go (or vendors it).
replace cloudstream.local/edgestream => ../
