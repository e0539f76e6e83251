module cloudstream.local/edgestream

go 1.19
